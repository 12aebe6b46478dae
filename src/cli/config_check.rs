//! `seckill config check [FILE]`: read the configuration as `serve` would and print every
//! effective value with its source, or fail naming what is wrong. It reads the file itself, so
//! a file that cannot be read or parsed is reported here rather than before any subcommand runs.

use crate::config::Config;
use std::io::Write;
use std::path::PathBuf;

/// The `seckill config` subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Print the effective configuration, each value with its source (default, file or
    /// variable; secrets hidden), after the checks a start makes; exit non-zero naming the bad
    /// setting, or the file that cannot be read.
    Check {
        /// The TOML file to check; else `--config` or `SECKILL_CONFIG`, else none.
        file: Option<PathBuf>,
    },
}

/// Runs `command`; `configured` is the file `--config` or `SECKILL_CONFIG` names.
pub fn run(command: Command, configured: Option<PathBuf>) -> anyhow::Result<()> {
    let Command::Check { file } = command;
    let file = file.or(configured);
    let report = Config::check(file.as_deref())?;
    crate::app::check_payment_keys(&report.config)?;
    let shown = match &file {
        Some(file) => file.display().to_string(),
        None => "none".to_owned(),
    };
    // Written, not printed: a closed pipe (`| head`) is an error to report, not a panic.
    write!(std::io::stdout().lock(), "file: {shown}\n{report}")?;
    Ok(())
}
