//! `npcmem`: the admin, demo and bench command (see `entry`).

fn main() -> std::process::ExitCode {
    npcmem_cli::main()
}
