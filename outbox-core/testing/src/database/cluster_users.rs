//! Which processes use the shared test cluster: one file per process under
//! `<cluster dir>/users`, locked (shared) for as long as the process uses the
//! cluster. A file whose lock is free belongs to a process that is gone (it
//! was killed, or never reached its exit handler) and counts for nothing.
//!
//! Callers hold the cluster's exclusive `lock` file around [`join`] and
//! [`live_users`], so that no one counts a file between its creation and its
//! lock.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use fs2::FileExt;

/// One process's claim on the cluster: its file in the users folder, locked
/// until [`leave`](Self::leave) or drop.
#[derive(Debug)]
pub(crate) struct ClusterUser {
    file: File,
    path: PathBuf,
}

impl ClusterUser {
    /// Unlocks and removes this user's file.
    pub(crate) fn leave(self) {
        // Drop does it.
    }
}

impl Drop for ClusterUser {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        let _ = FileExt::unlock(&self.file);
    }
}

/// Registers a user of the cluster whose users folder is `users`.
///
/// # Errors
///
/// The I/O error when the file cannot be created or locked.
pub(crate) fn join(users: &Path) -> io::Result<ClusterUser> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    fs::create_dir_all(users)?;
    let name = format!(
        "{}.{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let path = users.join(name);
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    file.lock_shared()?;
    Ok(ClusterUser { file, path })
}

/// How many users of the cluster are alive; removes the files of dead ones.
///
/// # Errors
///
/// The I/O error when the folder cannot be read.
pub(crate) fn live_users(users: &Path) -> io::Result<usize> {
    let entries = match fs::read_dir(users) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut live = 0;
    for entry in entries {
        let path = entry?.path();
        let Ok(file) = File::open(&path) else {
            continue; // removed meanwhile by its owner
        };
        if file.try_lock_exclusive().is_ok() {
            // Nobody holds it: its process is gone.
            let _ = fs::remove_file(&path);
            let _ = FileExt::unlock(&file);
        } else {
            live += 1;
        }
    }
    Ok(live)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn users_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "outbox-users-test-{name}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        dir.join("users")
    }

    #[test]
    fn users_are_counted_until_they_leave() {
        let users = users_dir("count");
        assert_eq!(live_users(&users).unwrap(), 0, "no folder yet");
        let first = join(&users).unwrap();
        let second = join(&users).unwrap();
        assert_eq!(live_users(&users).unwrap(), 2);
        first.leave();
        assert_eq!(live_users(&users).unwrap(), 1);
        drop(second);
        assert_eq!(live_users(&users).unwrap(), 0);
        assert_eq!(fs::read_dir(&users).unwrap().count(), 0, "files removed");
        fs::remove_dir_all(users.parent().unwrap()).unwrap();
    }

    #[test]
    fn files_of_dead_processes_count_for_nothing_and_are_removed() {
        let users = users_dir("stale");
        let alive = join(&users).unwrap();
        // A process killed while using the cluster leaves its file, unlocked.
        let stale = users.join("999999999.0");
        File::create(&stale).unwrap();
        assert_eq!(live_users(&users).unwrap(), 1);
        assert!(!stale.exists(), "the stale file is removed");
        assert!(alive.path.exists(), "the live one stays");
        drop(alive);
        fs::remove_dir_all(users.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_user_counted_by_another_process_stays_live() {
        // flock(2) locks belong to the open file: a second open in this
        // process sees the lock as another process would.
        let users = users_dir("other");
        let user = join(&users).unwrap();
        let other_view = File::open(&user.path).unwrap();
        assert!(other_view.try_lock_exclusive().is_err());
        assert_eq!(live_users(&users).unwrap(), 1);
        drop(user);
        assert!(other_view.try_lock_exclusive().is_ok());
        fs::remove_dir_all(users.parent().unwrap()).unwrap();
    }
}
