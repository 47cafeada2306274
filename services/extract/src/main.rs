fn main() -> std::process::ExitCode {
    npcmem_extract::main()
}
