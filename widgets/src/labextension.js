// torchleak's JupyterLab / Notebook 7 mime renderer: a finished report, saved in the notebook
// under application/vnd.torchleak.report+json, reopens interactive without a kernel (the way
// plotly and vega outputs do), drawn by the same view as the live widget.
//
// JupyterLab loads a prebuilt extension as a webpack module-federation container: a classic
// script that sets window._JUPYTERLAB[name] to {init(shareScope), get(module)}. The view has
// no dependencies, so the container is written by hand instead of by webpack; the one thing it
// takes from JupyterLab is Lumino's Widget class, from the share scope JupyterLab passes to
// init() (the same singleton every extension gets).
(function () {
  "use strict";
  const MIME = "application/vnd.torchleak.report+json";

  __TORCHLEAK_VIEW__

  let shareScope = null;

  function newer(a, b) {
    const pa = a.split(/[.-]/).map(Number), pb = b.split(/[.-]/).map(Number);
    for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
      const x = pa[i] || 0, y = pb[i] || 0;
      if (x !== y) return x > y;
    }
    return false;
  }

  async function shared(name) {
    const versions = (shareScope && shareScope[name]) || {};
    const keys = Object.keys(versions);
    if (!keys.length) throw new Error(`torchleak: ${name} is not shared by this JupyterLab`);
    const best = keys.reduce((a, b) => (newer(b, a) ? b : a));
    const factory = await versions[best].get();
    return factory();
  }

  function mimeExtension(Widget) {
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
          } catch (error) {
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
            on: (event, f) => { if (event === "change:report") live.listeners.push(f); },
            off: () => { live.listeners = []; },
          };
          this.disposeView = render({ model: saved, el: this.node });
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
    return {
      id: "torchleak:report",
      description: "Renders torchleak reports saved in notebooks.",
      // Safe: the view builds DOM from text nodes only, so untrusted (reopened) notebooks
      // render it too.
      rendererFactory: { safe: true, mimeTypes: [MIME], createRenderer: (o) => new ReportRenderer(o) },
      rank: 0, // before text/html (rank 50), the fallback for every other front end
      dataType: "json",
    };
  }

  const modules = {
    "./mimeExtension": async () => {
      const { Widget } = await shared("@lumino/widgets");
      const ext = mimeExtension(Widget);
      return () => ({ __esModule: true, default: ext });
    },
  };

  const root = (window._JUPYTERLAB = window._JUPYTERLAB || {});
  root.torchleak = {
    init(scope) {
      shareScope = scope;
    },
    get(module) {
      if (!modules[module]) return Promise.reject(new Error(`torchleak has no module ${module}`));
      return modules[module]();
    },
  };
})();
