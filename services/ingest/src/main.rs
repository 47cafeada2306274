fn main() -> std::process::ExitCode {
    npcmem_ingest::main()
}
