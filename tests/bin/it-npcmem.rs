//! The npcmem command, built inside the test package for the `up` test
//! (CARGO_BIN_EXE_*); same entry point as the real one.
fn main() -> std::process::ExitCode {
    npcmem_cli::main()
}
