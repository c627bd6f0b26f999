// What counts as test code in a shipped path (the control plane image's files, relative to its
// working folder): testing/ folders, *.test.* files and test-/fake-/fixtures/harness modules.
// Used by image-contents.test.mjs (the files the Dockerfile copies) and
// control-plane-image.test.mjs (the files a built image holds).

/** @param {string} path a file's path, `/`-separated */
export function isTestCode(path) {
  return (
    /(^|\/)testing\//.test(path) ||
    /\.test\.(js|d\.ts|js\.map)$/.test(path) ||
    /(^|\/)(test-|fake-|.*-fixtures\.|.*-harness\.)/.test(path.split('/').pop())
  );
}
