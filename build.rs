//! Rebuilds when a migration is added: `sqlx::migrate!` embeds the migrations directory at
//! compile time, and cargo would not notice a new file in it on its own.
//!
//! Names the commit the binary is built from (`SECKILL_COMMIT`, shown in `/metrics` as
//! `seckill_build_info`): `git rev-parse --short=12 HEAD`, or `unknown` where there is no git
//! or no repository (a build from a source tarball).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|text| text.trim().to_owned())
        .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SECKILL_COMMIT={commit}");
    for file in head_files() {
        println!("cargo:rerun-if-changed={}", file.display());
    }
}

/// The files whose change means HEAD moved: `HEAD` itself (a checkout) and the file of the
/// branch it points at (a commit), in the repository's git directory, which a worktree keeps
/// apart from the common one. None without a repository: then nothing but the sources
/// reruns this script.
fn head_files() -> Vec<PathBuf> {
    let git = |args: &[&str]| -> Option<PathBuf> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| PathBuf::from(text.trim()))
    };
    let Some(dir) = git(&["rev-parse", "--git-dir"]) else {
        return Vec::new();
    };
    let common = git(&["rev-parse", "--git-common-dir"]).unwrap_or_else(|| dir.clone());
    let mut files = vec![dir.join("HEAD")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        files.push(common.join(&branch));
        // A branch whose file was packed lives in `packed-refs` only.
        files.push(common.join("packed-refs"));
    }
    files.retain(|file| Path::new(file).exists());
    files
}
