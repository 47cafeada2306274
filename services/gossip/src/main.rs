fn main() -> std::process::ExitCode {
    npcmem_gossip::main()
}
