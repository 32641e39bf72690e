//! The generated admin token's file (`<data-dir>/admin-token`), when one
//! process runs all three silos without `--admin-token`.
//!
//! The token is the running instance's: another start must not replace it
//! and lock that instance's operator out. So the process that serves holds
//! an exclusive lock on `<data-dir>/admin-token.lock` for as long as it
//! runs (the operating system releases it when the process ends, killed or
//! not); a start that finds it held is refused ([`TokenFileError::InUse`]),
//! and writes nothing. The lock is taken once the silos' listeners are
//! bound (a start on ports in use fails before it), and the token is
//! written whole or not at all: to a temporary file in the same folder,
//! then renamed over the old one.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Why the token file cannot be claimed or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenFileError {
    /// Another process serves with the token in this file.
    #[error(
        "another example-app is serving with the admin token in {} (it holds {}): \
         stop it first, or start this one with another --data-dir, or give --admin-token",
        token.display(),
        lock.display()
    )]
    InUse {
        /// The token file.
        token: PathBuf,
        /// The lock file its process holds.
        lock: PathBuf,
    },
    /// The folder, the lock file or the token file cannot be written.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// What could not be written.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The admin token file, claimed by this process: no other instance
/// replaces it while this value lives (keep it for as long as the silos
/// serve with the token).
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    /// Locked exclusively; unlocked when dropped, or when the process ends.
    _lock: File,
}

impl TokenFile {
    /// Claims the token file `path`, creating its folder: takes the lock
    /// file beside it (`<path>.lock`), without waiting.
    ///
    /// # Errors
    ///
    /// [`TokenFileError::InUse`] when another process holds it;
    /// [`TokenFileError::Io`] when it cannot be created.
    pub fn claim(path: &Path) -> Result<Self, TokenFileError> {
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| TokenFileError::Io { path, source }
        };
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let lock_path = lock_path(path);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => Ok(Self {
                path: path.to_owned(),
                _lock: lock,
            }),
            Err(TryLockError::WouldBlock) => Err(TokenFileError::InUse {
                token: path.to_owned(),
                lock: lock_path,
            }),
            Err(TryLockError::Error(source)) => Err(TokenFileError::Io {
                path: lock_path,
                source,
            }),
        }
    }

    /// The token file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `token` (and a newline) to the file, readable by its owner
    /// only (mode 0600 on Unix): to a temporary file in the same folder,
    /// then renamed over the file, so that a reader sees the old token or
    /// the new one, never a part.
    ///
    /// # Errors
    ///
    /// [`TokenFileError::Io`]; the old file is then left as it was.
    pub fn write(&self, token: &str) -> Result<(), TokenFileError> {
        let name = self
            .path
            .file_name()
            .map_or_else(|| "admin-token".into(), |name| name.to_string_lossy());
        let temporary = self
            .path
            .with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        let written =
            write_new(&temporary, token).and_then(|()| std::fs::rename(&temporary, &self.path));
        if let Err(source) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(TokenFileError::Io {
                path: self.path.clone(),
                source,
            });
        }
        Ok(())
    }
}

/// The lock file of token file `path`: `<path>.lock`.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    PathBuf::from(lock)
}

/// Writes `token` to a new file `path` (replacing a leftover of a process
/// that died before its rename), mode 0600, and flushes it to disk.
fn write_new(path: &Path, token: &str) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(token.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "outbox-admin-token-{name}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_claimed_token_file_is_refused_to_a_second_claim_until_released() {
        let dir = folder("claim");
        let path = dir.join("data").join("admin-token");
        let first = TokenFile::claim(&path).unwrap();
        first.write("first-token").unwrap();
        let refused = TokenFile::claim(&path).unwrap_err();
        assert!(
            matches!(&refused, TokenFileError::InUse { token, .. } if token == &path),
            "{refused}"
        );
        let message = refused.to_string();
        assert!(
            message.contains("--data-dir") && message.contains("--admin-token"),
            "{message}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "first-token\n",
            "the refused claim wrote nothing"
        );
        drop(first);
        let second = TokenFile::claim(&path).unwrap();
        second.write("second-token").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second-token\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_token_is_written_whole_owner_only_and_leaves_no_temporary_file() {
        let dir = folder("write");
        let path = dir.join("admin-token");
        // An old file, readable by all: replaced, not rewritten in place.
        std::fs::write(&path, "old\n").unwrap();
        let file = TokenFile::claim(&path).unwrap();
        file.write("new-token").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new-token\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["admin-token", "admin-token.lock"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
