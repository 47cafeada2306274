//! The npcmem-relate binary, built inside the test package for the crash tests
//! (CARGO_BIN_EXE_*); same entry point as the real one.
fn main() -> std::process::ExitCode {
    npcmem_relate::main()
}
