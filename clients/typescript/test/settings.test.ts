import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";

import { NpcmemError, locateEnvFile, parseEnvFile, resolveSettings } from "../src/index.js";
import { unquote } from "../src/settings.js";

const root = mkdtempSync(join(tmpdir(), "npcmem-ts-settings-"));
after(() => rmSync(root, { recursive: true, force: true }));

describe("parseEnvFile", () => {
  it("reads what deploy/local/up writes and nothing else", () => {
    const text = [
      "# Written by deploy/local/up: the endpoints this world uses (source it).",
      "export NPCMEM_NATS_URL=nats://127.0.0.1:4333",
      "export NPCMEM_DATABASE_URL=postgres://postgres@127.0.0.1:5433/npcmem",
      "export NPCMEM_NATS_PASSWORD=p\\$ss\\ word",
      "export NPCMEM_INGEST_HTTP=http://127.0.0.1:46749",
      "export PATH=/evil",
      "export NPCMEM_X",
      "NPCMEM_NO_EXPORT=plain",
      "",
    ].join("\n");
    assert.deepEqual(parseEnvFile(text), {
      NPCMEM_NATS_URL: "nats://127.0.0.1:4333",
      NPCMEM_DATABASE_URL: "postgres://postgres@127.0.0.1:5433/npcmem",
      NPCMEM_NATS_PASSWORD: "p$ss word",
      NPCMEM_INGEST_HTTP: "http://127.0.0.1:46749",
      NPCMEM_NO_EXPORT: "plain",
    });
  });

  it("unquotes values as bash printf %q writes them", () => {
    // printf %q output for: a b'c  |  tab\there  |  ~home  |  empty
    assert.equal(unquote("a\\ b\\'c"), "a b'c");
    assert.equal(unquote("$'tab\\there'"), "tab\there");
    assert.equal(unquote("$'line\\nbreak\\x41\\101'"), "line\nbreakAA");
    assert.equal(unquote("\\~home"), "~home");
    assert.equal(unquote("''"), "");
    assert.equal(unquote("'single quoted $x'"), "single quoted $x");
    assert.equal(unquote('"double \\"quoted\\" \\$x"'), 'double "quoted" $x');
    assert.equal(unquote("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    assert.deepEqual(parseEnvFile("export NPCMEM_NATS_PASSWORD='it''s'\r\n"), { NPCMEM_NATS_PASSWORD: "its" });
  });
});

describe("locateEnvFile", () => {
  it("prefers NPCMEM_ENV_FILE, else finds .local/env in the nearest ancestor", () => {
    const world = join(root, "world");
    const deep = join(world, "a", "b");
    mkdirSync(join(world, ".local"), { recursive: true });
    mkdirSync(deep, { recursive: true });
    writeFileSync(join(world, ".local", "env"), "export NPCMEM_NATS_URL=nats://x:1\n");
    assert.equal(locateEnvFile({}, deep), join(world, ".local", "env"));
    assert.equal(locateEnvFile({ NPCMEM_ENV_FILE: "/some/where" }, deep), "/some/where");
    const lonely = mkdtempSync(join(tmpdir(), "npcmem-ts-none-"));
    try {
      // (an ancestor of the temp dir could have one; only check it is not this world's)
      assert.notEqual(locateEnvFile({}, lonely), join(world, ".local", "env"));
    } finally {
      rmSync(lonely, { recursive: true, force: true });
    }
  });
});

describe("resolveSettings", () => {
  const file = join(root, "precedence.env");
  writeFileSync(
    file,
    [
      "export NPCMEM_NATS_URL=nats://from-file:1",
      "export NPCMEM_SUBJECT_PREFIX=filepfx",
      "export NPCMEM_STREAM_PREFIX=FILEPFX",
      "export NPCMEM_INGEST_HTTP=http://from-file:2/",
      "export NPCMEM_ENRICH_HTTP=http://from-file:3",
      "export NPCMEM_NATS_USER=file-user",
      "export NPCMEM_NATS_PASSWORD=file\\ pass",
    ].join("\n"),
  );

  it("falls back to the defaults", () => {
    const empty = join(root, "empty.env");
    writeFileSync(empty, "# nothing\n");
    const s = resolveSettings({ env: {}, cwd: root, envFile: empty });
    assert.deepEqual(s.natsUrls, ["nats://127.0.0.1:4222"]);
    assert.equal(s.subjectPrefix, "npcmem");
    assert.equal(s.streamPrefix, "NPCMEM");
    assert.equal(s.ingestHttp, undefined);
    assert.equal(s.enrichHttp, undefined);
    assert.equal(s.user, undefined);
    assert.equal(s.transport, "auto");
    assert.equal(s.requestTimeoutMs, 5000);
  });

  it("reads the env file when nothing else sets a value", () => {
    const s = resolveSettings({ env: { NPCMEM_ENV_FILE: file }, cwd: root });
    assert.deepEqual(s.natsUrls, ["nats://from-file:1"]);
    assert.equal(s.subjectPrefix, "filepfx");
    assert.equal(s.streamPrefix, "FILEPFX");
    assert.equal(s.ingestHttp, "http://from-file:2");
    assert.equal(s.enrichHttp, "http://from-file:3");
    assert.equal(s.user, "file-user");
    assert.equal(s.password, "file pass");
    assert.equal(s.envFile, file);
  });

  it("lets the environment win over the env file", () => {
    const s = resolveSettings({
      env: { NPCMEM_ENV_FILE: file, NPCMEM_NATS_URL: "nats://from-env:1,nats://from-env:2", NPCMEM_STREAM_PREFIX: "ENVPFX" },
      cwd: root,
    });
    assert.deepEqual(s.natsUrls, ["nats://from-env:1", "nats://from-env:2"]);
    assert.equal(s.streamPrefix, "ENVPFX");
    assert.equal(s.subjectPrefix, "filepfx");
  });

  it("lets explicit options win over everything", () => {
    const s = resolveSettings({
      env: { NPCMEM_ENV_FILE: file, NPCMEM_NATS_URL: "nats://from-env:1", NPCMEM_SUBJECT_PREFIX: "envpfx" },
      cwd: root,
      natsUrl: ["nats://opt:1"],
      subjectPrefix: "optpfx",
      enrichHttp: "http://opt:3",
      transport: "http",
    });
    assert.deepEqual(s.natsUrls, ["nats://opt:1"]);
    assert.equal(s.subjectPrefix, "optpfx");
    assert.equal(s.enrichHttp, "http://opt:3");
    assert.equal(s.ingestHttp, "http://from-file:2");
    assert.equal(s.transport, "http");
  });

  it("finds .local/env from the working directory and takes the envFile option first", () => {
    const world = join(root, "w2");
    mkdirSync(join(world, ".local"), { recursive: true });
    writeFileSync(join(world, ".local", "env"), "export NPCMEM_NATS_URL=nats://found:9\n");
    assert.deepEqual(resolveSettings({ env: {}, cwd: world }).natsUrls, ["nats://found:9"]);
    assert.deepEqual(resolveSettings({ env: {}, cwd: world, envFile: file }).natsUrls, ["nats://from-file:1"]);
  });

  it("refuses bad prefixes and an explicit env file that cannot be read", () => {
    assert.throws(() => resolveSettings({ env: {}, cwd: root, subjectPrefix: "a.b" }), (e: unknown) => e instanceof NpcmemError && e.field === "subjectPrefix");
    assert.throws(
      () => resolveSettings({ env: { NPCMEM_ENV_FILE: join(root, "missing.env") }, cwd: root }),
      (e: unknown) => e instanceof NpcmemError && e.code === "invalid_field",
    );
  });
});
