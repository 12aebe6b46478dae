//! The `seckill` binary: parses the command line and hands over to the library.

fn main() -> std::process::ExitCode {
    seckill::cli::run()
}
