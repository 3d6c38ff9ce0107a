//! The rules-file watcher (feature `watch`): real files in a directory of the target's temp
//! dir, real `notify`. A change (rewritten in place, renamed over, a ConfigMap's symlink
//! swap, the file a symlink names in another directory, a file replaced by a symlink, a
//! symlink pointed elsewhere, a chain of them, a replaced directory, one a symlink leads
//! into removed and back, a symlinked directory above switched to another release, a
//! link into the parent on a path through a symlinked directory, a symlinked directory on
//! the way a link leads switched to another release, a link's target directory switched, a
//! ConfigMap swap in the directory a link leads into) is applied; a
//! broken file, one with no rules and a missing one keep the rules in
//! force and are counted; the content last applied is not applied again; `reload_now`
//! applies at once; a dropped watch stops and releases the policy.
//!
//! Only waiting is timed: each test polls for what it expects (30 s at most) and never
//! asserts how fast it came.
#![cfg(feature = "watch")]

#[cfg(feature = "tracing")]
mod events_support;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tollgate::policy::{Policy, ReloadError, RulesFile};
use tollgate::ManualClock;

/// The debounce of these tests' watches.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// A fresh directory for one test, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("policy_watch")
            .join(format!("{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// One rule: `limit` per hour for every client.
fn rules(limit: u64) -> String {
    format!("[[rules]]\nname = \"default\"\nlimit = {limit}\nwindow = \"1h\"\n")
}

/// Writes `text` next to `path` and renames it over `path`, as a deploy does.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("toml.tmp");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// A policy of `rules(limit)` on a stopped clock, and its rules file.
fn setup(dir: &TempDir, limit: u64) -> (Arc<Policy<ManualClock>>, PathBuf) {
    let path = dir.join("rules.toml");
    fs::write(&path, rules(limit)).unwrap();
    let policy = Policy::from_toml(&rules(limit), ManualClock::new()).unwrap();
    (Arc::new(policy), path)
}

/// The limit a request meets now (consuming nothing).
fn limit(policy: &Policy<ManualClock>) -> u64 {
    policy.peek("acct_1", "/search", 0).unwrap().limit()
}

/// Polls `done` until it holds; fails after 30 s, saying `what` was awaited.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "waited 30 s for {what}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

fn watch(policy: &Arc<Policy<ManualClock>>, path: &Path) -> RulesFile {
    RulesFile::builder(path)
        .debounce(DEBOUNCE)
        .watch(Arc::clone(policy))
        .unwrap()
}

#[test]
fn a_file_rewritten_in_place_is_applied() {
    let dir = TempDir::new("rewritten");
    let (policy, path) = setup(&dir, 2);
    let watch = watch(&policy, &path);
    assert_eq!(limit(&policy), 2);
    fs::write(&path, rules(7)).unwrap();
    wait_until("the new limit", || limit(&policy) == 7);
    let status = watch.status();
    assert!(status.applied >= 1, "{status:?}");
    assert_eq!(watch.path(), path);
}

#[test]
fn a_file_renamed_over_it_is_applied() {
    let dir = TempDir::new("renamed");
    let (policy, path) = setup(&dir, 2);
    let watch = watch(&policy, &path);
    replace(&path, &rules(9));
    wait_until("the new limit", || limit(&policy) == 9);
    // One rename, one read: the temporary file's own events are not the rules file's.
    wait_until("the status", || watch.status().applied == 1);
    let status = watch.status();
    assert_eq!((status.refused, status.unreadable), (0, 0), "{status:?}");
    // And again: the watch follows the new file, not the inode it started on.
    replace(&path, &rules(11));
    wait_until("the second limit", || limit(&policy) == 11);
}

/// The rules file's whole directory replaced (`rm -rf conf; mv conf.new conf`, as a
/// deploy of a config directory does): the new directory's file is applied, and so are
/// edits to it afterwards (the watch follows the directory of that name, not the one it
/// started on). Removed and not yet back: the missing file is counted, the rules kept.
#[test]
fn a_replaced_directory_is_followed() {
    let root = TempDir::new("replaced-dir");
    let conf = root.join("conf");
    fs::create_dir_all(&conf).unwrap();
    let path = conf.join("rules.toml");
    fs::write(&path, rules(2)).unwrap();
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let watch = watch(&policy, &path);
    let staged = root.join("conf.new");
    fs::create_dir_all(&staged).unwrap();
    fs::write(staged.join("rules.toml"), rules(5)).unwrap();
    fs::remove_dir_all(&conf).unwrap();
    fs::rename(&staged, &conf).unwrap();
    wait_until("the new directory's limit", || limit(&policy) == 5);
    fs::write(&path, rules(8)).unwrap();
    wait_until("an edit in the new directory", || limit(&policy) == 8);
    // Gone for a while: counted, the rules kept; back: applied.
    fs::remove_dir_all(&conf).unwrap();
    wait_until("the missing file counted", || {
        watch.status().unreadable >= 1
    });
    assert_eq!(limit(&policy), 8);
    fs::create_dir_all(&conf).unwrap();
    fs::write(&path, rules(3)).unwrap();
    wait_until("the directory back", || limit(&policy) == 3);
}

/// A Kubernetes ConfigMap volume: `rules.toml → ..data/rules.toml`, `..data → ..v1`,
/// updated by renaming a new `..data` symlink over the old one.
#[cfg(unix)]
#[test]
fn a_config_maps_symlink_swap_is_applied() {
    let dir = TempDir::new("configmap");
    config_map(&dir.0);
    let path = dir.join("rules.toml");
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let _watch = watch(&policy, &path);
    config_map_update(&dir.0, &policy);
}

/// A ConfigMap volume in `dir`: `rules.toml → ..data/rules.toml`, `..data → ..v1`, whose
/// file has limit 2.
#[cfg(unix)]
fn config_map(dir: &Path) {
    use std::os::unix::fs::symlink;
    fs::create_dir_all(dir.join("..v1")).unwrap();
    fs::write(dir.join("..v1/rules.toml"), rules(2)).unwrap();
    symlink("..v1", dir.join("..data")).unwrap();
    symlink("..data/rules.toml", dir.join("rules.toml")).unwrap();
}

/// Updates the ConfigMap volume in `dir` as the kubelet does (`..v2` written, a new
/// `..data` symlink renamed over the old one) to limit 5, and waits for `policy` to have it.
#[cfg(unix)]
fn config_map_update(dir: &Path, policy: &Policy<ManualClock>) {
    use std::os::unix::fs::symlink;
    fs::create_dir(dir.join("..v2")).unwrap();
    fs::write(dir.join("..v2/rules.toml"), rules(5)).unwrap();
    symlink("..v2", dir.join("..data_tmp")).unwrap();
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    wait_until("the new limit", || limit(policy) == 5);
}

/// `rules.toml → /elsewhere/rules.toml` (a file kept in another directory, linked into the
/// server's): an edit of that file, in place or renamed over it, is applied.
#[cfg(unix)]
#[test]
fn a_symlink_into_another_directory_follows_its_file() {
    use std::os::unix::fs::symlink;
    let dir = TempDir::new("symlink-elsewhere");
    fs::create_dir(dir.join("etc")).unwrap();
    fs::create_dir(dir.join("elsewhere")).unwrap();
    let target = dir.join("elsewhere/rules.toml");
    fs::write(&target, rules(2)).unwrap();
    let path = dir.join("etc/rules.toml");
    symlink(&target, &path).unwrap();
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let watch = watch(&policy, &path);

    fs::write(&target, rules(5)).unwrap();
    wait_until("the edit in place", || limit(&policy) == 5);
    replace(&target, &rules(7));
    wait_until("the file renamed over", || limit(&policy) == 7);
    // Its directory's other files are not the rules file's.
    assert_not_read(&watch, &dir.join("elsewhere/other.toml"));
}

/// Writes `path`, which is not the rules file (nor where it leads), and checks that the
/// watch read nothing for it: no apply, no unchanged read, after twenty debounces.
#[cfg(unix)]
fn assert_not_read(watch: &RulesFile, path: &Path) {
    let status = watch.status();
    fs::write(path, rules(9)).unwrap();
    thread::sleep(DEBOUNCE * 20);
    let after = watch.status();
    assert_eq!(
        (after.applied, after.unchanged),
        (status.applied, status.unchanged),
        "{after:?}"
    );
}

/// Makes `path` a symlink to `target` in one step: a new symlink renamed over it (what
/// `ln -sfn` and a deploy do).
#[cfg(unix)]
fn relink(target: &Path, path: &Path) {
    let tmp = path.with_extension("toml.link");
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// `rules.toml`, a plain file when the watch starts, replaced by a symlink to a file in
/// another directory (`ln -sf /srv/config/rules.toml rules.toml`): that file is applied,
/// and so are its edits afterwards.
#[cfg(unix)]
#[test]
fn a_file_replaced_by_a_symlink_follows_its_target() {
    let dir = TempDir::new("file-to-symlink");
    fs::create_dir(dir.join("etc")).unwrap();
    fs::create_dir(dir.join("elsewhere")).unwrap();
    let path = dir.join("etc/rules.toml");
    fs::write(&path, rules(2)).unwrap();
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let _watch = watch(&policy, &path);

    let target = dir.join("elsewhere/rules.toml");
    fs::write(&target, rules(5)).unwrap();
    relink(&target, &path);
    wait_until("the symlink's file", || limit(&policy) == 5);
    fs::write(&target, rules(7)).unwrap();
    wait_until("the edit in place", || limit(&policy) == 7);
    replace(&target, &rules(9));
    wait_until("the file renamed over", || limit(&policy) == 9);
}

/// `rules.toml → v1/rules.toml` pointed at a file in a third directory (`ln -sfn`): the new
/// file's edits are applied, the old one's no longer read.
#[cfg(unix)]
#[test]
fn a_retargeted_symlink_follows_its_new_target() {
    let dir = TempDir::new("retargeted");
    for sub in ["etc", "v1", "v2"] {
        fs::create_dir(dir.join(sub)).unwrap();
    }
    let (old, new) = (dir.join("v1/rules.toml"), dir.join("v2/rules.toml"));
    fs::write(&old, rules(2)).unwrap();
    let path = dir.join("etc/rules.toml");
    std::os::unix::fs::symlink(&old, &path).unwrap();
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let watch = watch(&policy, &path);

    fs::write(&new, rules(5)).unwrap();
    relink(&new, &path);
    wait_until("the new target", || limit(&policy) == 5);
    fs::write(&new, rules(7)).unwrap();
    wait_until("the edit of the new target", || limit(&policy) == 7);
    // The old target's directory is no longer watched: its edits read nothing.
    assert_not_read(&watch, &old);
}

/// A chain, `etc/rules.toml → a/rules.toml → b/rules.toml`: the file at its end is
/// followed, and so is a change of the link in the middle (`a/rules.toml → c/rules.toml`).
#[cfg(unix)]
#[test]
fn a_symlink_chain_is_followed_link_by_link() {
    let dir = TempDir::new("chain");
    for sub in ["etc", "a", "b", "c"] {
        fs::create_dir(dir.join(sub)).unwrap();
    }
    let (middle, end) = (dir.join("a/rules.toml"), dir.join("b/rules.toml"));
    fs::write(&end, rules(2)).unwrap();
    std::os::unix::fs::symlink(&end, &middle).unwrap();
    let path = dir.join("etc/rules.toml");
    std::os::unix::fs::symlink(&middle, &path).unwrap();
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let _watch = watch(&policy, &path);

    fs::write(&end, rules(5)).unwrap();
    wait_until("the edit at the chain's end", || limit(&policy) == 5);
    let other = dir.join("c/rules.toml");
    fs::write(&other, rules(7)).unwrap();
    relink(&other, &middle);
    wait_until("the middle link changed", || limit(&policy) == 7);
    fs::write(&other, rules(9)).unwrap();
    wait_until("the edit at the new end", || limit(&policy) == 9);
}

#[test]
fn a_broken_an_empty_and_a_missing_file_keep_the_rules() {
    let dir = TempDir::new("refused");
    let (policy, path) = setup(&dir, 2);
    let watch = watch(&policy, &path);

    replace(&path, "[[rules]\nname = \"default\"\n");
    wait_until("the TOML error", || watch.status().refused == 1);
    let status = watch.status();
    assert!(
        matches!(&status.last_error, Some(ReloadError::Rules(e)) if e.path == "toml"),
        "{status:?}"
    );
    assert_eq!(limit(&policy), 2);

    replace(&path, "# every rule removed\n");
    wait_until("the empty set's refusal", || watch.status().refused == 2);
    let status = watch.status();
    let error = status.last_error.as_ref().map(ToString::to_string);
    assert!(
        error.as_deref().is_some_and(|e| e.contains("no rules")),
        "{status:?}"
    );
    assert_eq!(limit(&policy), 2);

    fs::remove_file(&path).unwrap();
    wait_until("the failed read", || watch.status().unreadable >= 1);
    let status = watch.status();
    assert!(
        matches!(&status.last_error, Some(ReloadError::Read { path: p, error })
            if *p == path && error.kind() == std::io::ErrorKind::NotFound),
        "{status:?}"
    );
    let error = status.last_error.unwrap().to_string();
    assert!(
        error.starts_with(&format!("reading {}: ", path.display())),
        "the read error names the file: {error}"
    );

    // Decisions still follow the old rules: 2 per hour.
    assert_eq!(watch.status().applied, 0);
    assert!(policy.allow("acct_1", "/search", 1).unwrap().allowed());
    assert!(policy.allow("acct_1", "/search", 1).unwrap().allowed());
    assert!(!policy.allow("acct_1", "/search", 1).unwrap().allowed());

    // A good file again is applied, and clears the error.
    replace(&path, &rules(4));
    wait_until("the new limit", || limit(&policy) == 4);
    wait_until("the error cleared", || watch.status().last_error.is_none());
}

#[test]
fn the_content_last_applied_is_not_applied_again() {
    let dir = TempDir::new("unchanged");
    let (policy, path) = setup(&dir, 2);
    let watch = watch(&policy, &path);
    replace(&path, &rules(3));
    wait_until("the first change", || limit(&policy) == 3);
    wait_until("its status", || watch.status().applied == 1);
    let before = watch.status();

    // The same bytes, written in place and renamed over: read, found unchanged.
    fs::write(&path, rules(3)).unwrap();
    wait_until("the rewrite's read", || {
        watch.status().unchanged > before.unchanged
    });
    let unchanged = watch.status().unchanged;
    replace(&path, &rules(3));
    wait_until("the rename's read", || watch.status().unchanged > unchanged);
    let after = watch.status();
    assert_eq!(after.applied, before.applied, "{after:?}");

    // A real change after them: exactly one more reload applied.
    replace(&path, &rules(6));
    wait_until("the real change", || limit(&policy) == 6);
    let status = watch.status();
    assert_eq!(status.applied, before.applied + 1, "{status:?}");
    // (Not `refused`: a read between the in-place write's truncation and its bytes, were
    // the writer descheduled that long, would be an empty file refused.)
    assert_eq!(status.unreadable, 0, "{status:?}");
}

#[test]
fn reload_now_applies_at_once_whatever_the_debounce() {
    let dir = TempDir::new("reload_now");
    let (policy, path) = setup(&dir, 2);
    // The watch would not read the file within the test: only `reload_now` does.
    let watch = RulesFile::builder(&path)
        .debounce(Duration::from_secs(3600))
        .watch(Arc::clone(&policy))
        .unwrap();
    replace(&path, &rules(8));
    let report = watch.reload_now().unwrap();
    assert_eq!(report.changed(), ["default"]);
    assert_eq!(limit(&policy), 8);
    // Applied even when the content is the one last applied (a SIGHUP means "now").
    assert!(watch.reload_now().unwrap().is_empty());
    let status = watch.status();
    assert_eq!((status.applied, status.unchanged), (2, 0), "{status:?}");

    replace(
        &path,
        "[[rules]]\nname = \"default\"\nlimit = 0\nwindow = \"1m\"\n",
    );
    let error = watch.reload_now().unwrap_err();
    assert_eq!(error.to_string(), "rules[0].limit: must be > 0");
    assert_eq!(limit(&policy), 8);
    assert_eq!(watch.status().refused, 1);
    // Dropped mid-debounce: the thread stops at once (the test would hang otherwise).
    drop(watch);
    assert_eq!(
        Arc::strong_count(&policy),
        1,
        "the watch released the policy"
    );
}

#[test]
fn a_dropped_watch_stops() {
    let dir = TempDir::new("dropped");
    let (policy, path) = setup(&dir, 2);
    let watch = watch(&policy, &path);
    replace(&path, &rules(3));
    wait_until("the watch working", || limit(&policy) == 3);
    assert_eq!(Arc::strong_count(&policy), 2);
    drop(watch);
    // The thread has ended (it held the policy), and nothing else of the watch holds it.
    assert_eq!(
        Arc::strong_count(&policy),
        1,
        "the watch released the policy"
    );
    replace(&path, &rules(5));
    // Twenty debounces: a running watch would have applied it.
    thread::sleep(DEBOUNCE * 20);
    assert_eq!(limit(&policy), 3);
}

#[test]
fn a_watch_needs_a_directory_and_a_file_name() {
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let dir = TempDir::new("errors");
    let error = RulesFile::watch(Arc::clone(&policy), dir.join("missing/rules.toml")).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with(&format!("watching {}: ", dir.join("missing").display())),
        "{error}"
    );
    let error = RulesFile::watch(Arc::clone(&policy), "/").unwrap_err();
    assert_eq!(error.to_string(), "/: not a file's path");
    assert_eq!(Arc::strong_count(&policy), 1);
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RulesFile>();
}

/// A failed read never reaches the policy, so the watch reports it itself: a `warn` naming
/// the file (feature `tracing`).
#[cfg(feature = "tracing")]
#[test]
fn a_failed_read_is_a_warning() {
    let dir = TempDir::new("warned");
    let (policy, path) = setup(&dir, 2);
    let watch = RulesFile::builder(&path)
        .debounce(Duration::from_secs(3600))
        .watch(Arc::clone(&policy))
        .unwrap();
    fs::remove_file(&path).unwrap();
    let events = Arc::new(events_support::Events::at_least(tracing::Level::TRACE));
    {
        let _default = tracing::subscriber::set_default(Arc::clone(&events));
        assert!(matches!(watch.reload_now(), Err(ReloadError::Read { .. })));
    }
    let events = events.seen();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert!(
        events[0].starts_with(&format!(
            "WARN message=tollgate: rules file unreadable; the rules in force are kept path={}",
            path.display()
        )),
        "{}",
        events[0]
    );
    assert_eq!(watch.status().unreadable, 1);
}

/// `etc/rules.toml → ../srv/rules.toml` in a directory `real`, watched through `alias`
/// (a symlink to `real`) if `aliased`, and `srv` replaced as a whole (`rm -rf srv; mv
/// srv.new srv`), with a read between the two steps if `read_between` (the watch sees `srv`
/// gone, counts the missing file and stops watching it). The new directory's file is
/// applied, then its edits:
/// - the old directory took its watch with it: the watch is armed again on the directory
///   now of that name (its identity changed);
/// - read between: the missing `srv` is watched for from the directory above it, and its
///   return seen;
/// - aliased: that directory is the file's parent, whose watch names its events by the
///   path's name for it (`alias/srv`), not its real path (`real/srv`).
#[cfg(unix)]
fn a_replaced_directory_a_symlink_leads_into(test: &str, aliased: bool, read_between: bool) {
    let dir = TempDir::new(test);
    let real = dir.join("real");
    for sub in ["etc", "srv", "srv.new"] {
        fs::create_dir_all(real.join(sub)).unwrap();
    }
    fs::write(real.join("srv/rules.toml"), rules(2)).unwrap();
    std::os::unix::fs::symlink("../srv/rules.toml", real.join("etc/rules.toml")).unwrap();
    let path = if aliased {
        std::os::unix::fs::symlink(&real, dir.join("alias")).unwrap();
        dir.join("alias/etc/rules.toml")
    } else {
        real.join("etc/rules.toml")
    };
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let watch = watch(&policy, &path);

    fs::write(real.join("srv.new/rules.toml"), rules(5)).unwrap();
    fs::remove_dir_all(real.join("srv")).unwrap();
    if read_between {
        wait_until("the missing file counted", || {
            watch.status().unreadable >= 1
        });
    }
    fs::rename(real.join("srv.new"), real.join("srv")).unwrap();
    wait_until("the new directory's file", || limit(&policy) == 5);
    fs::write(real.join("srv/rules.toml"), rules(7)).unwrap();
    wait_until("an edit in the new directory", || limit(&policy) == 7);
}

#[cfg(unix)]
#[test]
fn a_replaced_directory_a_symlink_leads_into_is_followed() {
    a_replaced_directory_a_symlink_leads_into("symlink-dir-replaced", false, false);
}

#[cfg(unix)]
#[test]
fn a_directory_a_symlink_leads_into_removed_then_back_is_followed() {
    a_replaced_directory_a_symlink_leads_into("symlink-dir-gone", false, true);
}

#[cfg(unix)]
#[test]
fn a_directory_removed_then_back_through_a_symlinked_directory_is_followed() {
    a_replaced_directory_a_symlink_leads_into("aliased-dir-gone", true, true);
}

/// A release layout (`current → releases/v1`, the rules in `current/config/rules.toml`): a
/// deploy points `current` at the next release in one step (a new symlink renamed over
/// it). The change is an event in `current`'s own directory, above the file's directory
/// and its parent: the new release's file is applied, then its edits, and the old
/// release's are no longer read.
#[cfg(unix)]
#[test]
fn a_directory_symlink_above_the_file_switched_to_another_release_is_followed() {
    let dir = TempDir::new("release-switch");
    releases(&dir.0, "current", "");
    let path = dir.join("current/config/rules.toml");
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let watch = watch(&policy, &path);
    next_release_is_followed((&dir.0, "current", ""), &policy, &watch);
}

/// A release layout in `root`: `releases/v1` and `releases/v2`, each with
/// `config/rules.toml` (limits 2 and 5), and the symlink `link` to `releases/v1` (with
/// `below`: to that directory in it).
#[cfg(unix)]
fn releases(root: &Path, link: &str, below: &str) {
    for (release, limit) in [("v1", 2), ("v2", 5)] {
        let config = root.join(format!("releases/{release}/config"));
        fs::create_dir_all(&config).unwrap();
        fs::write(config.join("rules.toml"), rules(limit)).unwrap();
    }
    std::os::unix::fs::symlink(format!("releases/v1{below}"), root.join(link)).unwrap();
}

/// Points the release layout's `link` in `root` at `v2` (and `below` in it) in one step (a
/// new symlink renamed over it, as a deploy does), then checks that `watch` applies v2's
/// file, then its edits, and no longer reads v1's.
#[cfg(unix)]
fn next_release_is_followed(
    (root, link, below): (&Path, &str, &str),
    policy: &Policy<ManualClock>,
    watch: &RulesFile,
) {
    let tmp = root.join(format!("{link}.new"));
    std::os::unix::fs::symlink(format!("releases/v2{below}"), &tmp).unwrap();
    fs::rename(&tmp, root.join(link)).unwrap();
    wait_until("the next release's file", || limit(policy) == 5);
    fs::write(root.join("releases/v2/config/rules.toml"), rules(7)).unwrap();
    wait_until("an edit in the next release", || limit(policy) == 7);
    assert_not_read(watch, &root.join("releases/v1/config/rules.toml"));
}

/// A path through a symlinked directory (`alias → the test's directory`) whose file is a
/// symlink to a file in the directory's parent (`alias/etc/rules.toml → ../rules.toml`):
/// the parent is watched by the name the path gives it, and its events name the file that
/// way, not by its real path; the file's edits are applied.
#[cfg(unix)]
#[test]
fn a_link_into_the_parent_through_a_symlinked_directory_is_followed() {
    let dir = TempDir::new("aliased-parent");
    let real = dir.join("real");
    fs::create_dir_all(real.join("etc")).unwrap();
    fs::write(real.join("rules.toml"), rules(2)).unwrap();
    std::os::unix::fs::symlink("../rules.toml", real.join("etc/rules.toml")).unwrap();
    std::os::unix::fs::symlink(&real, dir.join("alias")).unwrap();
    let path = dir.join("alias/etc/rules.toml");
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let _watch = watch(&policy, &path);

    fs::write(real.join("rules.toml"), rules(5)).unwrap();
    wait_until("an edit of the file in the parent", || limit(&policy) == 5);
}

/// `conf/rules.toml` in `dir`, a symlink to `target`, watched, and the policy (limit 2) it
/// reloads.
#[cfg(unix)]
fn watched_link(dir: &TempDir, target: &str) -> (Arc<Policy<ManualClock>>, RulesFile) {
    fs::create_dir_all(dir.join("conf")).unwrap();
    let path = dir.join("conf/rules.toml");
    std::os::unix::fs::symlink(target, &path).unwrap();
    let policy = Arc::new(Policy::from_toml(&rules(2), ManualClock::new()).unwrap());
    let watch = watch(&policy, &path);
    (policy, watch)
}

/// A file that is a symlink into a release layout (`conf/rules.toml →
/// ../srv/current/config/rules.toml`, `current → releases/v1`): a deploy points `current`
/// at the next release in one step, which changes the file the link leads to with an
/// event only in `current`'s own directory, off the file's path. The next release's file
/// is applied, then its edits, and the old release's are no longer read.
#[cfg(unix)]
#[test]
fn a_symlinked_directory_on_a_links_way_switched_to_another_release_is_followed() {
    let dir = TempDir::new("link-release-switch");
    let srv = dir.join("srv");
    releases(&srv, "current", "");
    let (policy, watch) = watched_link(&dir, "../srv/current/config/rules.toml");
    next_release_is_followed((&srv, "current", ""), &policy, &watch);
}

/// A link whose target's own directory is a symlink switched to another release
/// (`conf/rules.toml → ../srv/config/rules.toml`, `srv/config → releases/v1/config`): the
/// switch, an event only in `srv`, is followed.
#[cfg(unix)]
#[test]
fn a_links_target_directory_switched_to_another_release_is_followed() {
    let dir = TempDir::new("link-target-dir-switch");
    let srv = dir.join("srv");
    releases(&srv, "config", "/config");
    let (policy, watch) = watched_link(&dir, "../srv/config/rules.toml");
    next_release_is_followed((&srv, "config", "/config"), &policy, &watch);
}

/// A link into a ConfigMap volume mounted elsewhere (`conf/rules.toml → ../cm/rules.toml`,
/// `cm/rules.toml → ..data/rules.toml`, `..data → ..v1`): the volume's `..data` swap, an
/// event only in `cm` naming `..data`, is followed (the old version left in place).
#[cfg(unix)]
#[test]
fn a_config_maps_swap_a_link_leads_into_is_applied() {
    let dir = TempDir::new("link-configmap");
    let cm = dir.join("cm");
    config_map(&cm);
    let (policy, _watch) = watched_link(&dir, "../cm/rules.toml");
    config_map_update(&cm, &policy);
}
