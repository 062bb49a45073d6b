// torchleak's JupyterLab / Notebook 7 mime renderer: a finished report, saved in the notebook
// under application/vnd.torchleak.report+json, reopens interactive without a kernel (the way
// plotly and vega outputs do), drawn by the same view as the live widget.
//
// JupyterLab's builder (`jupyter labextension build`, @jupyterlab/builder) turns this module
// into the prebuilt extension under widgets/dist/labextension: a module-federation container
// that takes Lumino from the share scope JupyterLab hands it, so the renderer's Widget is the
// same class every other extension gets.
import { Widget } from "@lumino/widgets";
// The anywidget module build.py writes (the view with its CSS inlined): one view for both.
import view from "../../dist/torchleak-widget.js";

const MIME = "application/vnd.torchleak.report+json";

class ReportRenderer extends Widget {
  constructor(options) {
    super();
    this.mimeType = options.mimeType;
    this.addClass("torchleak-report");
    this.disposeView = null;
    this.live = null; // the drawn view's state and change listeners, for its redraws
  }

  // JupyterLab hands the same renderer each update of its output (a live run's
  // update_display_data): the view then redraws in place from the new state, so rows the
  // user opened stay open, instead of a new view being built for every update.
  renderModel(model) {
    const meta = (model.metadata && model.metadata[this.mimeType]) || {};
    const next = { report: model.data[this.mimeType], progress: meta.progress };
    if (this.live) {
      Object.assign(this.live.state, next);
      try {
        for (const f of this.live.listeners) f();
        return Promise.resolve();
      } catch {
        // A redraw that throws: start over below, and say so if that throws too.
      }
    }
    if (this.disposeView) this.disposeView();
    this.disposeView = null;
    this.live = null;
    this.node.replaceChildren();
    // The run's final line ("20 iterations in 12.1 s") rides in the output's metadata.
    // A rejected render makes JupyterLab stop drawing the notebook's later outputs: whatever
    // goes wrong is said here, in this output only.
    try {
      const live = { state: next, listeners: [] };
      const saved = {
        get: (key) => live.state[key],
        on: (event, f) => {
          if (event === "change:report") live.listeners.push(f);
        },
        off: () => {
          live.listeners = [];
        },
      };
      this.disposeView = view.render({ model: saved, el: this.node });
      this.live = live;
    } catch (error) {
      const line = document.createElement("div");
      line.dataset.testid = "render-error";
      line.textContent = `torchleak could not draw this report: ${(error && error.message) || error}`;
      this.node.replaceChildren(line);
    }
    return Promise.resolve();
  }

  dispose() {
    if (this.disposeView) this.disposeView();
    this.disposeView = null;
    this.live = null;
    super.dispose();
  }
}

export default {
  id: "torchleak:report",
  description: "Renders torchleak reports saved in notebooks.",
  // Safe: the view builds DOM from text nodes only, so untrusted (reopened) notebooks
  // render it too.
  rendererFactory: {
    safe: true,
    mimeTypes: [MIME],
    createRenderer: (options) => new ReportRenderer(options),
  },
  rank: 0, // before text/html (rank 50), the fallback for every other front end
  dataType: "json",
};
