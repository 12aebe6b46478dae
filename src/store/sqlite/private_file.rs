//! The database file holds password hashes, orders and (unless the environment provides them)
//! the token secret and the admin token, so only its owner may read it: it is created `0600`,
//! SQLite gives its journals the file's own permissions, and a file an earlier version left
//! readable by others is closed up at start.

use std::fs::{OpenOptions, Permissions};
use std::io::ErrorKind;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// What SQLite keeps beside the database file.
const JOURNALS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Creates `file` readable and writable by its owner only, unless it exists; then takes away
/// every other reader of it and of its journals.
pub fn make_private(file: &Path) -> std::io::Result<()> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
    {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let mut paths = vec![file.to_owned()];
    for suffix in JOURNALS {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        paths.push(name.into());
    }
    for path in paths {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(&path, Permissions::from_mode(0o600))?;
            tracing::info!(file = %path.display(), "made the database file readable by its owner only");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_file_is_its_owners_only_and_an_open_one_is_closed_up_with_its_journals() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("seckill.db");
        make_private(&file).unwrap();
        assert_eq!(mode(&file), 0o600);

        let wal = dir.path().join("seckill.db-wal");
        std::fs::write(&wal, b"").unwrap();
        for path in [&file, &wal] {
            std::fs::set_permissions(path, Permissions::from_mode(0o644)).unwrap();
        }
        make_private(&file).unwrap();
        assert_eq!((mode(&file), mode(&wal)), (0o600, 0o600));
    }

    #[test]
    fn the_journals_sqlite_makes_take_the_files_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("fresh.db");
        make_private(&file).unwrap();
        let db = rusqlite::Connection::open(&file).unwrap();
        db.pragma_update(None, "journal_mode", "WAL").unwrap();
        db.execute("CREATE TABLE t (x INTEGER)", []).unwrap();
        for journal in ["fresh.db-wal", "fresh.db-shm"] {
            assert_eq!(mode(&dir.path().join(journal)), 0o600, "{journal}");
        }
    }
}
