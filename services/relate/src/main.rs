fn main() -> std::process::ExitCode {
    npcmem_relate::main()
}
