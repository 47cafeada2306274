fn main() -> std::process::ExitCode {
    npcmem_consolidate::main()
}
