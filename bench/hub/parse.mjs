// Runs @huggingface/hub's parseSafetensorsMetadata against a hub and prints
// one JSON line: wall time and the parameter count it reports.
import { parseSafetensorsMetadata } from "@huggingface/hub";

const [hubUrl, repo] = process.argv.slice(2);
const t0 = performance.now();
const r = await parseSafetensorsMetadata({ repo: { type: "model", name: repo }, hubUrl, computeParametersCount: true });
const ms = performance.now() - t0;
const parameters = Object.values(r.parameterCount ?? {}).reduce((a, b) => a + b, 0);
console.log(JSON.stringify({ ms, parameters, byDtype: r.parameterCount, sharded: r.sharded }));
