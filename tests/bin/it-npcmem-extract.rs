//! The npcmem-extract binary, built inside the test package so that `cargo test` always
//! has a fresh copy for the crash tests (CARGO_BIN_EXE_*); same entry point as the real one.
fn main() -> std::process::ExitCode {
    npcmem_extract::main()
}
