//! The npcmem-consolidate binary, built inside the test package for the fault tests
//! (CARGO_BIN_EXE_*); same entry point as the real one.
fn main() -> std::process::ExitCode {
    npcmem_consolidate::main()
}
