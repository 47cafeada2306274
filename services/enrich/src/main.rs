fn main() -> std::process::ExitCode {
    npcmem_enrich::main()
}
