import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

// Compiled to build-test/test/: the package is two directories up.
const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

describe("generated types", () => {
  it("src/types.generated.ts is what scripts/gen-types.mjs makes of docs/schemas", async () => {
    const gen = await import(pathToFileURL(resolve(packageDir, "scripts", "gen-types.mjs")).href);
    const expected: string = gen.generate();
    const committed = readFileSync(resolve(packageDir, "src", "types.generated.ts"), "utf8");
    assert.ok(expected.includes("export interface ConversationEnded "));
    assert.ok(committed === expected, "src/types.generated.ts is out of date with docs/schemas: run `npm run gen-types`");
  });
});
