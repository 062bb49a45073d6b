// Merged into JupyterLab's builder config (package.json's jupyterlab.webpackConfig). Module ids
// are named by their path relative to this folder: the default ids hash the container entry's
// absolute path, so every checkout built different files and `build.py --check` could not hold.
module.exports = {
  optimization: {
    moduleIds: "named",
  },
};
