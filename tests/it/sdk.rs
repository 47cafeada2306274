//! The game-server SDKs in `clients/` and the MUD in `examples/mud`, their own test suites
//! run against a real system:
//! `deploy/local/up` on private servers, the SDK installed into a fresh virtualenv (pip,
//! from the package registry), every test including the integration ones
//! (`NPCMEM_SDK_INTEGRATION=1` makes them fail rather than skip without a system).

use std::process::Command;

use crate::deploy_local::World;

fn run(command: &mut Command, what: &str) -> String {
    let output = command.output().unwrap_or_else(|error| panic!("{what}: {error}"));
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    stdout.into_owned()
}

#[test]
fn the_python_sdk_passes_its_tests_against_a_running_system() {
    let (world, _) = World::up();
    let venv = world.release().join("../python-venv");
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv), "python3 -m venv");
    // Built from a copy: pip builds in the source tree, and the repository stays clean.
    let source = world.release().join("../python-sdk");
    run(Command::new("cp").arg("-r").arg(world.repository().join("clients/python")).arg(&source), "copy the SDK");
    let pip = venv.join("bin/pip");
    run(
        Command::new(&pip)
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(&source)
            .args(["pytest", "pytest-asyncio"]),
        "pip install the SDK and pytest",
    );
    let summary = run(
        world
            .command(venv.join("bin/python"))
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .current_dir(world.repository().join("clients/python"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("NPCMEM_SDK_INTEGRATION", "1")
            .env("NPCMEM_ENV_FILE", world.env_file()),
        "pytest clients/python",
    );
    assert!(summary.contains(" passed") && !summary.contains("skipped"), "every test ran: {summary}");
    // The MUD example, on the same SDK: its scripted session against the same system.
    let mud = run(
        world
            .command(venv.join("bin/python"))
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/mud/test_session.py"])
            .current_dir(world.repository())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("NPCMEM_SDK_INTEGRATION", "1")
            .env("NPCMEM_ENV_FILE", world.env_file()),
        "pytest examples/mud",
    );
    assert!(mud.contains("1 passed"), "the MUD's scripted session: {mud}");
}

#[test]
fn the_typescript_sdk_passes_its_tests_against_a_running_system() {
    let (world, _) = World::up();
    // In place: node_modules and the build output are ignored by git, and the types test
    // reads the schemas beside the package.
    let source = world.repository().join("clients/typescript");
    run(
        world.command("npm").args(["ci", "--no-audit", "--no-fund", "--loglevel=error"]).current_dir(&source),
        "npm ci",
    );
    // The generated types still match the schemas.
    run(
        world.command("node").arg(source.join("scripts/gen-types.mjs")).arg("--check").current_dir(&source),
        "gen-types --check",
    );
    let summary = run(
        world
            .command("npm")
            .args(["test", "--silent"])
            .current_dir(&source)
            .env("NPCMEM_SDK_INTEGRATION", "1")
            .env("NPCMEM_ENV_FILE", world.env_file()),
        "npm test",
    );
    assert!(summary.contains("# fail 0") && summary.contains("# skipped 0"), "every test ran: {summary}");
}
