//! [`RulesFile`]: a rules file watched for changes, each change reloaded into a policy
//! (feature `watch`, off by default; it pulls in `notify`).
//!
//! How it watches, when it reloads, what it keeps and how to call it on SIGHUP: see
//! [`RulesFile`].

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{PolicyConfigError, ReloadReport, ReloadToml};
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};

/// The default debounce: how long the events must be quiet before the file is read.
const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);
/// The longest debounce [`RulesFileBuilder::debounce`] takes.
const MAX_DEBOUNCE: Duration = Duration::from_secs(3600);
/// A burst of events postpones the read by at most this many debounces.
const MAX_DEBOUNCES: u32 = 10;

/// A rules file watched for changes, each reloaded into a policy on a thread of its own
/// (feature `watch`). Dropping it stops the watch.
///
/// ```no_run
/// use std::sync::Arc;
/// use tollgate::policy::{Policy, RulesFile};
/// use tollgate::MonotonicClock;
///
/// let text = std::fs::read_to_string("/etc/myapp/rules.toml")?;
/// let policy = Arc::new(Policy::from_toml(&text, MonotonicClock::new())?);
/// let rules = RulesFile::watch(Arc::clone(&policy), "/etc/myapp/rules.toml")?;
/// // … serve with `policy`; keep `rules` alive as long as the file should be followed.
/// // In the server's own SIGHUP handler:
/// match rules.reload_now() {
///     Ok(report) => println!("rules reloaded: {report}"),
///     Err(error) => eprintln!("rules kept: {error}"),
/// }
/// println!("{:?}", rules.status());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # What is watched
///
/// The file's **directory**, not the file: a deploy or an editor that writes
/// `rules.toml.tmp` and renames it over `rules.toml` replaces the file a watch on it would
/// follow, and the watch would go quiet. Events are kept for entries of the file's name
/// only, except where the path is a symlink (a Kubernetes ConfigMap:
/// `rules.toml → ..data/rules.toml`, updated by renaming a new `..data` symlink into
/// place): then an event on any entry of the directory counts, since the file's content
/// changes without an event naming it; and when the symlink leads into another directory,
/// that directory is watched too, for the entry there (each link of a chain, and the file at
/// its end). The path is resolved again before each read, so the watch follows it when it
/// leads elsewhere: a file replaced by a symlink (`ln -sf /srv/config/rules.toml
/// rules.toml`), a symlink pointed at another file (`ln -sfn`), a link of a chain changed;
/// a directory it no longer leads through is no longer watched. Reads of the file (ours
/// included) are not changes.
///
/// The directory's parent is watched too, for the directory's own entry: a deploy that
/// replaces the whole directory (`rm -rf conf; mv conf.new conf`) moves the watch to the
/// new directory, then reads the file; a directory removed and not yet back counts the
/// missing file, and is watched again when it comes back (so is a directory a symlink
/// leads into: the nearest directory above it that exists is watched for its return). A
/// symlinked directory higher on the path (a release layout:
/// `/srv/app/current/config/rules.toml`, `current → releases/v1`) has its own directory
/// watched for its entry (unless that directory is the root: a top-level symlink such as
/// macOS's `/etc` is taken as fixed): a deploy that points it at the next release moves the
/// watches there, then reads the file. So does a symlinked directory on the way to where a
/// symlink leads (`rules.toml → /srv/app/current/config/rules.toml`): switched, it is a
/// change, and the read that follows resolves the links again.
///
/// # When it reloads
///
/// On its own thread, once the events have been quiet for the debounce
/// ([`RulesFileBuilder::debounce`], 100 ms by default; an editor's save or a deploy is a
/// burst of events) and at the latest ten debounces after the first of a burst. It reads
/// the file and calls the policy's `reload_toml`, so the reload never runs on an async
/// runtime's worker. It reloads on change only: the policy already has its rules when the
/// watch starts. The policy's own reload events say what each reload changed (a `tracing`
/// event, `metrics` counters; see [`Policy::reload`](super::Policy::reload)).
///
/// The rules in force are kept, and the attempt is counted in [`RulesFile::status`], when
/// - the file cannot be read (it is missing, or not UTF-8): also a `tracing` `warn` under
///   the crate's `tracing` feature, and with `metrics` the counter
///   `tollgate_policy_reloads_total{outcome="unreadable"}`;
/// - its TOML or a rule is wrong, or it has no rules (a file caught half-written: the
///   policy refuses an empty set unless it says `allow_empty = true`): the policy's own
///   `warn` and `tollgate_policy_reloads_total{outcome="refused"}` report it.
///
/// A content identical to the last one applied is not reloaded (counted as unchanged).
///
/// # SIGHUP
///
/// [`RulesFile::reload_now`] reads the file and applies it at once, returning the outcome:
/// call it from the server's own signal handling (`tokio::signal::unix` with
/// `SignalKind::hangup()`, `signal_hook::iterator::Signals`). There is no `on_sighup` here,
/// deliberately: the handler of a signal is process-wide (installing one replaces
/// SIGHUP's default of ending the process, for the whole program), a server that handles
/// SIGHUP already has a place for it, and a second handler from a library would either
/// fight that one or need its own thread. The reload itself is short (a file read and a
/// rule-set compile); call it with `spawn_blocking` if a worker must never wait on a disk.
///
/// # Stopping
///
/// Dropping the [`RulesFile`] stops the watch: the thread ends and is joined (it waits for a
/// reload under way, never for a debounce), and the policy is released.
pub struct RulesFile {
    shared: Arc<Shared>,
    /// Stops the thread (and wakes it from a debounce).
    stop: Sender<Message>,
    thread: Option<JoinHandle<()>>,
}

/// How to watch a rules file: [`RulesFile::builder`].
#[derive(Clone, Debug)]
pub struct RulesFileBuilder {
    path: PathBuf,
    debounce: Duration,
}

/// What a [`RulesFile`] has done since it started: [`RulesFile::status`].
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct WatchStatus {
    /// Reloads applied (the policy took the file's rules).
    pub applied: u64,
    /// Reloads the policy refused (a TOML or rule error, no rules): the rules were kept.
    pub refused: u64,
    /// Reads that failed (the file missing, unreadable, not UTF-8): the rules were kept.
    pub unreadable: u64,
    /// Reads skipped because the content was the one last applied.
    pub unchanged: u64,
    /// Why the content last read is not in force: the error of the last attempt, `None`
    /// once a later one applied or found the content already in force.
    pub last_error: Option<ReloadError>,
}

/// Why a reload of the rules file kept the rules in force.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ReloadError {
    /// The file could not be read (it is missing, unreadable, or not UTF-8).
    Read {
        /// The rules file.
        path: PathBuf,
        /// What the read returned.
        error: Arc<io::Error>,
    },
    /// The policy refused the rules: the error names the field
    /// ([`PolicyConfig::from_toml`](super::PolicyConfig::from_toml)).
    Rules(PolicyConfigError),
}

/// Why [`RulesFile::watch`] could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum WatchError {
    /// The path names no file (it is a root or ends in `..`).
    NotAFile(PathBuf),
    /// The file's directory cannot be watched: it does not exist, or the system refused
    /// (on Linux, the inotify watch limit), or the watch thread could not start.
    Watch {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Where the rules file's path leads when it is a symlink (or a chain of them), and the
/// directories watched for that: resolved when the watch starts and again before each read,
/// so a file replaced by a symlink, a symlink pointed elsewhere, or a link of a chain
/// changed moves the watch to where the path leads now.
#[derive(Clone, Debug, Default, PartialEq)]
struct Links {
    /// The path is a symlink: an event on any entry of its directory counts (a ConfigMap's
    /// `..data` swap changes the file it names without an event naming the path).
    any_entry: bool,
    /// The entries the path leads through, the links of a chain then the file at its end,
    /// each as its directory's real path and its own name: an event on one of them counts.
    entries: Vec<PathBuf>,
    /// The directories on the path from the file's directory's parent up that are
    /// symlinks (a release layout's `current → releases/v1`), each as its directory's real
    /// path and its own name: pointing one elsewhere moves the file's directory, with an
    /// event only in that symlink's own directory (for the parent: the grandparent, not
    /// watched otherwise), so an event naming one moves the watch as a replaced directory
    /// does.
    above: Vec<PathBuf>,
    /// The directories watched for all these entries: those the watch holds besides the
    /// file's own directory and its parent (watched already, and for longer).
    dirs: Vec<WatchedDir>,
}

/// A directory a symlink leads into, as resolved: its path, and which directory that was
/// (its device and inode, on Unix). One replaced under the same name (`rm -rf srv; mv
/// srv.new srv`) took its watch with it: a changed identity arms the watch again on the
/// directory now of that name.
#[derive(Clone, Debug, PartialEq)]
struct WatchedDir {
    path: PathBuf,
    id: Option<(u64, u64)>,
}

impl WatchedDir {
    /// `path` as it is now.
    fn of(path: PathBuf) -> WatchedDir {
        #[cfg(unix)]
        let id = {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(&path).ok().map(|m| (m.dev(), m.ino()))
        };
        #[cfg(not(unix))]
        let id = None;
        WatchedDir { path, id }
    }
}

/// The longest chain of symlinks followed from the path (Linux's own limit); a longer one,
/// or a loop, is followed that far.
const MAX_LINKS: usize = 40;

impl Links {
    /// Follows `path`, link by link, to the file it names (or to where it stops: a missing
    /// entry or directory).
    fn resolve(path: &Path) -> Links {
        let canonical = |dir: Option<&Path>| dir.and_then(|dir| fs::canonicalize(dir).ok());
        let dir = path.parent();
        let watched = [canonical(dir), canonical(dir.and_then(Path::parent))];
        let mut links = Links::default();
        let watch = |links: &mut Links, parent: PathBuf| {
            if !watched.contains(&Some(parent.clone()))
                && !links.dirs.iter().any(|d| d.path == parent)
            {
                links.dirs.push(WatchedDir::of(parent));
            }
        };
        // An entry `name` of the directory whose real path is `parent`, kept for the events
        // that name it. In the file's directory or its parent, also under the name the path
        // gives that directory (which may differ from its real path, through a symlinked
        // directory on the way): their watches name their events that way.
        let named = [dir, dir.and_then(Path::parent)];
        let entry = |links: &mut Links, parent: &Path, name: &OsStr| {
            let mut add = |path: PathBuf| {
                // Once (each link of a chain finds the same symlinked directories).
                if !links.entries.contains(&path) {
                    links.entries.push(path);
                }
            };
            for (real, named) in watched.iter().zip(named) {
                if let (Some(real), Some(named)) = (real, named) {
                    if real == parent && named != real.as_path() {
                        add(named.join(name));
                    }
                }
            }
            add(parent.join(name));
        };
        // Symlinked directories from the directory's parent up (a switch of the directory
        // itself is an event in its parent, watched already; one of the parent is an event
        // in the grandparent, which is not).
        for (parent, name) in dir.iter().flat_map(|dir| symlinked_dirs(dir, 1)) {
            links.above.push(parent.join(name));
            watch(&mut links, parent);
        }
        let mut at = path.to_owned();
        for _ in 0..MAX_LINKS {
            // Not a symlink (or missing): the end.
            let Ok(target) = fs::read_link(&at) else {
                break;
            };
            links.any_entry = true;
            // Relative to the link's directory (an absolute target replaces it).
            let next = at.parent().unwrap_or(Path::new("")).join(target);
            let Some(name) = next.file_name() else {
                break;
            };
            // Symlinked directories on the way to the target (`/srv/app/current/config`,
            // `current → releases/v1`), its own directory included: pointing one elsewhere
            // changes the file the chain leads to, with an event only in that symlink's own
            // directory, watched for it. Such an event is a change: the read that follows
            // resolves the chain again.
            for (parent, name) in next.parent().iter().flat_map(|dir| symlinked_dirs(dir, 0)) {
                watch(&mut links, parent.clone());
                entry(&mut links, &parent, &name);
            }
            let Some(parent) = canonical(next.parent()) else {
                // The directory it leads into is missing (removed, its replacement not yet
                // renamed into place): the directory above the missing part is watched for
                // its entry, so that its return is seen.
                if let Some((above, missing)) = next.parent().and_then(missing_entry) {
                    watch(&mut links, above.clone());
                    entry(&mut links, &above, &missing);
                }
                break;
            };
            at = parent.join(name);
            watch(&mut links, parent.clone());
            entry(&mut links, &parent, name);
        }
        links
    }
}

/// The symlinks among `dir` and the directories above it (but the first `skip`), each as
/// its directory's real path and its own name. Not a top-level link (macOS's
/// `/etc → private/etc`): no deploy switches one, and a watch of the root is costly where
/// the system watches recursively (FSEvents).
fn symlinked_dirs(dir: &Path, skip: usize) -> impl Iterator<Item = (PathBuf, OsString)> + '_ {
    dir.ancestors().skip(skip).filter_map(|above| {
        if !fs::symlink_metadata(above).is_ok_and(|m| m.file_type().is_symlink()) {
            return None;
        }
        let parent = fs::canonicalize(above.parent()?).ok()?;
        parent.parent()?;
        Some((parent, above.file_name()?.to_owned()))
    })
}

/// Where the missing directory `dir` would come back: the nearest directory above it that
/// exists (its real path) and the name of the missing entry there; `None` if nothing
/// above it exists.
fn missing_entry(dir: &Path) -> Option<(PathBuf, OsString)> {
    dir.ancestors().find_map(|missing| {
        let above = fs::canonicalize(missing.parent()?).ok()?;
        Some((above, missing.file_name()?.to_owned()))
    })
}

/// What the watch thread is told.
enum Message {
    /// An event that may have changed the file.
    Changed,
    /// The file's directory itself was created, removed or renamed (a deploy that replaces
    /// the whole directory): the watch moves to the directory now of that name, then reads.
    Replaced,
    /// Stop.
    Stop,
}

/// The state the watch thread and [`RulesFile`] share.
struct Shared {
    policy: Arc<dyn ReloadToml + Send + Sync>,
    path: PathBuf,
    /// The file's directory, watched again when it is replaced.
    dir: PathBuf,
    /// The watch (`None` once stopping): taken by the thread to move to a replaced
    /// directory, dropped by [`RulesFile`]'s drop.
    watcher: Mutex<Option<RecommendedWatcher>>,
    /// Where the path leads, shared with the watcher's callback; changed by
    /// [`Shared::follow_links`] alone.
    links: Arc<Mutex<Links>>,
    /// The content last applied; held across a reload, so reloads happen one at a time.
    applied: Mutex<Option<String>>,
    status: Mutex<WatchStatus>,
}

impl RulesFile {
    /// Watches `path` with the default debounce and reloads `policy` each time the file
    /// changes ([`RulesFileBuilder::watch`]).
    pub fn watch<P>(policy: Arc<P>, path: impl AsRef<Path>) -> Result<RulesFile, WatchError>
    where
        P: ReloadToml + Send + Sync + 'static,
    {
        RulesFile::builder(path).watch(policy)
    }

    /// A watch of `path` to configure (the debounce), then start with
    /// [`RulesFileBuilder::watch`].
    pub fn builder(path: impl AsRef<Path>) -> RulesFileBuilder {
        RulesFileBuilder {
            path: path.as_ref().to_owned(),
            debounce: DEFAULT_DEBOUNCE,
        }
    }

    /// Reads the file and applies it now, whatever it holds (also the content last
    /// applied: the policy may have been reloaded from elsewhere since), returning what the
    /// reload changed or why the rules in force were kept. Counted in
    /// [`status`](Self::status) as the watch's own reloads are, and, as they do, it
    /// resolves the path again (a symlink that now leads elsewhere is followed from then
    /// on). For a server's SIGHUP handler; runs on the caller's thread, after a reload of
    /// the watch under way.
    pub fn reload_now(&self) -> Result<ReloadReport, ReloadError> {
        self.shared
            .reload(true)
            .map(|report| report.unwrap_or_default())
    }

    /// What the watch has done: reloads applied, refused, unreadable, unchanged, and the
    /// last error.
    pub fn status(&self) -> WatchStatus {
        self.shared.status().clone()
    }

    /// The rules file (made absolute when the watch started).
    pub fn path(&self) -> &Path {
        &self.shared.path
    }
}

impl fmt::Debug for RulesFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RulesFile")
            .field("path", &self.shared.path)
            .field("status", &*self.shared.status())
            .finish_non_exhaustive()
    }
}

impl Drop for RulesFile {
    fn drop(&mut self) {
        // Dropped first: no event is sent once the watch is being stopped.
        drop(self.shared.watcher().take());
        // The thread may have ended already (a panicking policy): nothing to tell then.
        let _ = self.stop.send(Message::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl RulesFileBuilder {
    /// Reads the file once the events have been quiet for `quiet` (100 ms by default; at
    /// most an hour, longer is taken as an hour). A burst of events postpones the read by
    /// at most ten times `quiet`.
    pub fn debounce(mut self, quiet: Duration) -> RulesFileBuilder {
        self.debounce = quiet.min(MAX_DEBOUNCE);
        self
    }

    /// Starts watching: from now on each change of the file reloads `policy` (which keeps
    /// its rules until then; the file is not read now). The file need not exist yet; its
    /// directory must.
    pub fn watch<P>(self, policy: Arc<P>) -> Result<RulesFile, WatchError>
    where
        P: ReloadToml + Send + Sync + 'static,
    {
        let RulesFileBuilder { path, debounce } = self;
        let path = std::path::absolute(&path).map_err(|error| WatchError::Watch {
            dir: path.clone(),
            source: Box::new(error),
        })?;
        let (Some(name), Some(dir)) = (path.file_name(), path.parent()) else {
            return Err(WatchError::NotAFile(path));
        };
        let (name, dir) = (name.to_owned(), dir.to_owned());
        let watch_error = |source: Box<dyn std::error::Error + Send + Sync>| WatchError::Watch {
            dir: dir.clone(),
            source,
        };
        // Where the path leads, read by the callback to judge each event; resolved (and the
        // directories it leads through watched) below, and again before each read.
        let links = Arc::new(Mutex::new(Links::default()));

        let (sender, receiver) = mpsc::channel();
        let events = sender.clone();
        let followed = Arc::clone(&links);
        let own_dir = dir.clone();
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<_>| {
            let links = lock(&followed);
            let message = if names(&event, &own_dir)
                || links.above.iter().any(|above| names(&event, above))
            {
                Message::Replaced
            } else if relevant(&event, (&name, &own_dir), &links) {
                Message::Changed
            } else {
                return;
            };
            drop(links);
            // Closed once the watch has stopped.
            let _ = events.send(message);
        })
        .map_err(|e| watch_error(Box::new(e)))?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| watch_error(Box::new(e)))?;
        // The directory's own parent, for the directory's entry: a deploy that replaces the
        // whole directory (`rm -rf conf; mv conf.new conf`) leaves the watch above on a
        // directory that is gone.
        if let Some(parent) = dir.parent() {
            watcher
                .watch(parent, RecursiveMode::NonRecursive)
                .map_err(|e| WatchError::Watch {
                    dir: parent.to_owned(),
                    source: Box::new(e),
                })?;
        }

        let shared = Arc::new(Shared {
            policy,
            path,
            dir: dir.clone(),
            watcher: Mutex::new(Some(watcher)),
            links,
            applied: Mutex::new(None),
            status: Mutex::new(WatchStatus::default()),
        });
        // A symlink into another directory: an edit of the file it names is an event there
        // only, so that directory is watched too (for that file).
        shared.follow_links()?;
        let thread = thread::Builder::new()
            .name("tollgate-rules-watch".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || run(&shared, &receiver, debounce)
            })
            .map_err(|e| watch_error(Box::new(e)))?;
        Ok(RulesFile {
            shared,
            stop: sender,
            thread: Some(thread),
        })
    }
}

/// Whether `event` is about the directory `dir` itself (seen from its parent: created,
/// removed, renamed), not about an entry in it.
fn names(event: &notify::Result<notify::Event>, dir: &Path) -> bool {
    event.as_ref().is_ok_and(|event| {
        !matches!(event.kind, EventKind::Access(_)) && event.paths.iter().any(|path| path == dir)
    })
}

/// Whether `event` may have changed the file `name` in `dir`: an entry of that name (but
/// in the directory's parent, watched for the directory alone), any entry of `dir` (when
/// the path is a symlink), or an entry the symlink leads through ([`Links::entries`]). A
/// lost event (an error, an overflowed queue) may have.
fn relevant(
    event: &notify::Result<notify::Event>,
    (name, dir): (&OsString, &Path),
    links: &Links,
) -> bool {
    let Ok(event) = event else {
        return true;
    };
    if let EventKind::Access(kind) = event.kind {
        // Reads are not changes (the watch's own among them); a writer closing the file is.
        if kind != AccessKind::Close(AccessMode::Write) {
            return false;
        }
    }
    event.need_rescan()
        || event.paths.iter().any(|path| {
            (path.file_name() == Some(name.as_os_str()) && path.parent() != dir.parent())
                || (links.any_entry && path.starts_with(dir))
                || links.entries.contains(path)
        })
}

/// The watch thread: waits for a change, lets the burst settle, reloads; until told to
/// stop.
fn run(shared: &Shared, messages: &Receiver<Message>, debounce: Duration) {
    loop {
        let mut replaced = match messages.recv() {
            Ok(Message::Changed) => false,
            Ok(Message::Replaced) => true,
            Ok(Message::Stop) | Err(_) => return,
        };
        let first = Instant::now();
        let latest = first + debounce * MAX_DEBOUNCES;
        let mut last = first;
        loop {
            let now = Instant::now();
            let due = (last + debounce).min(latest);
            if now >= due {
                break;
            }
            match messages.recv_timeout(due - now) {
                Ok(Message::Changed) => last = Instant::now(),
                Ok(Message::Replaced) => (replaced, last) = (true, Instant::now()),
                Err(RecvTimeoutError::Timeout) => break,
                Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        if replaced {
            shared.watch_dir_again();
        }
        // The outcome is in the status, and reported as it happened.
        let _ = shared.reload(false);
    }
}

impl Shared {
    /// Reads the file and reloads it into the policy: `Ok(None)` when the content is the
    /// one last applied (unless `always`).
    fn reload(&self, always: bool) -> Result<Option<ReloadReport>, ReloadError> {
        let mut applied = self.applied.lock().unwrap_or_else(PoisonError::into_inner);
        // The path may lead elsewhere since the last read (a symlink put in its place, or
        // pointed at another file): the next edit of the file it names now is seen.
        if let Err(error) = self.follow_links() {
            #[cfg(feature = "tracing")]
            tracing::warn!(
                %error,
                "tollgate: the directory the rules file's symlink leads to cannot be watched; \
                 its edits are not seen"
            );
            let _ = error;
        }
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(error) => {
                unreadable(&self.path, &error);
                let error = ReloadError::Read {
                    path: self.path.clone(),
                    error: Arc::new(error),
                };
                let mut status = self.status();
                status.unreadable += 1;
                status.last_error = Some(error.clone());
                return Err(error);
            }
        };
        if !always && applied.as_deref() == Some(text.as_str()) {
            let mut status = self.status();
            status.unchanged += 1;
            status.last_error = None;
            return Ok(None);
        }
        match self.policy.reload_toml(&text) {
            Ok(report) => {
                *applied = Some(text);
                let mut status = self.status();
                status.applied += 1;
                status.last_error = None;
                Ok(Some(report))
            }
            Err(error) => {
                let error = ReloadError::Rules(error);
                let mut status = self.status();
                status.refused += 1;
                status.last_error = Some(error.clone());
                Err(error)
            }
        }
    }

    fn status(&self) -> std::sync::MutexGuard<'_, WatchStatus> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn watcher(&self) -> std::sync::MutexGuard<'_, Option<RecommendedWatcher>> {
        self.watcher.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves the path again and moves the watches of the directories it leads through to
    /// where it leads now ([`Links`]): the directories no longer on the way are no longer
    /// watched, the new ones are. One that cannot be watched is left out (the error is
    /// returned) and tried again at the next resolution.
    fn follow_links(&self) -> Result<(), WatchError> {
        let mut watcher = self.watcher();
        let Some(watcher) = watcher.as_mut() else {
            // Stopping.
            return Ok(());
        };
        let mut now = Links::resolve(&self.path);
        // Not held across the watcher's calls: they wait for its thread, which may be in
        // the callback, waiting for this lock.
        let before = lock(&self.links).clone();
        if now == before {
            return Ok(());
        }
        // Unwatched unless still the same directory (the same name, the same directory
        // behind it); watched unless it was already.
        for dir in before.dirs.iter().filter(|d| !now.dirs.contains(d)) {
            // Its watch may be gone with it already.
            let _ = watcher.unwatch(&dir.path);
        }
        let mut result = Ok(());
        now.dirs.retain(|dir| {
            before.dirs.contains(dir)
                || watcher
                    .watch(&dir.path, RecursiveMode::NonRecursive)
                    .map_err(|error| {
                        result = Err(WatchError::Watch {
                            dir: dir.path.clone(),
                            source: Box::new(error),
                        });
                    })
                    .is_ok()
        });
        *lock(&self.links) = now;
        result
    }

    /// Moves the watches of the file's directory and its parent to the directories now of
    /// those names (the directory was replaced or removed, or a symlinked directory above
    /// it points elsewhere: [`Links::above`]). If there is none yet, the watch of its parent
    /// says when it comes back; the read that follows counts the missing file meanwhile.
    ///
    /// The parent first: while its watch is re-armed its events are not seen, and the
    /// directory's return (`mv conf.new conf`) is one. Landing in that gap, it is seen by
    /// the directory's watch armed next; the other way round, the directory's watch failed
    /// (still missing), then its return fell in the parent's gap, and nothing watched the
    /// directory again (the read that follows applies the file, but not its later edits).
    fn watch_dir_again(&self) {
        let mut watcher = self.watcher();
        let Some(watcher) = watcher.as_mut() else {
            // Stopping.
            return;
        };
        for dir in [self.dir.parent(), Some(self.dir.as_path())]
            .into_iter()
            .flatten()
        {
            // The old directory's watch is gone with it, or still on it if it was renamed
            // away.
            let _ = watcher.unwatch(dir);
            if let Err(error) = watcher.watch(dir, RecursiveMode::NonRecursive) {
                #[cfg(feature = "tracing")]
                tracing::warn!(
                    dir = %dir.display(),
                    %error,
                    "tollgate: the rules file's directory (or its parent) cannot be watched; \
                     watching for it to come back"
                );
                let _ = error;
            }
        }
    }
}

/// Locks `mutex`, also one a panic left poisoned (as the watch's other locks are taken).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reports a read of the rules file that failed (the policy never saw it, so its own
/// reload events do not).
fn unreadable(path: &Path, error: &io::Error) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        path = %path.display(),
        %error,
        "tollgate: rules file unreadable; the rules in force are kept"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_policy_reloads_total", "outcome" => "unreadable").increment(1);
    let _ = (path, error);
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::Read { path, error } => write!(f, "reading {}: {error}", path.display()),
            ReloadError::Rules(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for ReloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReloadError::Read { error, .. } => Some(&**error),
            ReloadError::Rules(error) => Some(error),
        }
    }
}

impl fmt::Display for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchError::NotAFile(path) => write!(f, "{}: not a file's path", path.display()),
            WatchError::Watch { dir, source } => {
                write!(f, "watching {}: {source}", dir.display())
            }
        }
    }
}

impl std::error::Error for WatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WatchError::NotAFile(_) => None,
            WatchError::Watch { source, .. } => Some(&**source),
        }
    }
}
