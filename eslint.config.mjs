// The front end's linter (make test-format): ESLint's recommended rules over the view, the lab
// extension and the view's unit tests. ESLint and its rules come from the lab extension's
// locked packages (widgets/labextension/yarn.lock), installed by widgets/build.py.
import { createRequire } from "node:module";

const require = createRequire(new URL("./widgets/labextension/package.json", import.meta.url));
const js = require("@eslint/js");
const globals = require("globals");

export default [
  { ignores: ["widgets/dist/**", "widgets/labextension/node_modules/**", "widgets/labextension/lib/**"] },
  js.configs.recommended,
  {
    files: ["widgets/src/**/*.js", "widgets/labextension/src/**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      // widgets/build.py puts the stylesheet where __TORCHLEAK_CSS__ stands.
      globals: { ...globals.browser, __TORCHLEAK_CSS__: "readonly" },
    },
  },
  {
    files: ["tests/widgets/**/*.mjs"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.node },
  },
];
