// Run a notebook's code cells in one Pyodide interpreter, offline; for `nbrecall render --backend pyodide`.
//
//   node runner.mjs JOB.json [FD]
//
// nbrecall starts this inside bubblewrap (no network, read-only binds): Pyodide alone is no file-system
// boundary (`mountNodeFS` reaches whatever the Node process can read), the sandbox is.
// JOB.json: {cells: [{index, source}], driver, pretty, kernel_paths, mounts, cwd, wheels, package_base, env}
// (see nbrecall/render/pyodide.py). Events go out as JSON lines on file descriptor FD (default 1):
//   {"event": "ready", "version", "seconds"}   {"event": "note", "text"}
//   {"event": "start", "cell"}   {"event": "output", "cell", "output"}   {"event": "done", "cell"}
//   {"event": "end"}   {"event": "fatal", "error"}
// Nothing is downloaded: the stdlib and the lock file come from node_modules/pyodide, packages only from the
// local wheel folder (`package_base`, which is also where a package missing locally would be looked for).

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const channel = Number(process.argv[3] || 1); // nbrecall passes a pipe of its own (fd 3)

function emit(event) {
  const line = JSON.stringify(event) + "\n";
  let buf = Buffer.from(line, "utf8");
  while (buf.length > 0) {
    try {
      const n = fs.writeSync(channel, buf);
      buf = buf.subarray(n);
    } catch (err) {
      if (err.code !== "EAGAIN") throw err;
    }
  }
}

async function main() {
  const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const started = Date.now();
  let loadPyodide, version;
  try {
    ({ loadPyodide, version } = await import("pyodide"));
  } catch (err) {
    emit({ event: "fatal", error: `cannot load the pyodide npm package: ${err.message}` });
    process.exit(2);
  }
  const indexURL = path.join(here, "node_modules", "pyodide") + path.sep;
  const base = job.package_base.endsWith("/") ? job.package_base : job.package_base + "/";
  const pyodide = await loadPyodide({
    indexURL,
    packageBaseUrl: base, // also the "CDN" Pyodide would fall back to: a local folder, never a network URL
    packageCacheDir: base,
    env: job.env,
    stdout: (text) => emit({ event: "raw", name: "stdout", text: text + "\n" }),
    stderr: (text) => emit({ event: "raw", name: "stderr", text: text + "\n" }),
  });
  for (const dir of job.mounts) {
    try {
      pyodide.mountNodeFS(dir, dir);
    } catch (err) {
      emit({ event: "note", text: `could not mount ${dir}: ${err.message}` });
    }
  }
  if (job.wheels.length) {
    const errors = [];
    try {
      await pyodide.loadPackage(job.wheels, {
        messageCallback: () => {},
        errorCallback: (msg) => errors.push(msg),
        checkIntegrity: true,
      });
    } catch (err) {
      errors.push(err.message);
    }
    for (const msg of errors) emit({ event: "note", text: `package loading: ${msg}`.slice(0, 500) });
  }
  emit({ event: "ready", version, seconds: (Date.now() - started) / 1000 });
  const ns = pyodide.globals.get("dict")();
  ns.set("__name__", "__nbrecall_driver__");
  ns.set("_nbr_emit", (text) => emit(JSON.parse(text)));
  pyodide.runPython(job.driver, { globals: ns });
  const setup = ns.get("setup");
  setup(JSON.stringify({ cwd: job.cwd, pretty: job.pretty, kernel_paths: job.kernel_paths }));
  const runCell = ns.get("run_cell");
  for (const cell of job.cells) {
    emit({ event: "start", cell: cell.index });
    await runCell(cell.index, cell.source, cell.count);
    emit({ event: "done", cell: cell.index });
  }
  emit({ event: "end" });
}

main().then(
  () => process.exit(0),
  (err) => {
    emit({ event: "fatal", error: String(err && err.message ? err.message : err).slice(-4000) });
    process.exit(2);
  },
);
