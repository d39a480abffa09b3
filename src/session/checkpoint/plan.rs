//! The rewind plan, pure: for each path, what is known about it (its state at the
//! checkpoint, whether it is there now, whether the agent left it so) in; what to write,
//! what to remove, what to leave as a conflict and what cannot be restored out.
//!
//! No I/O happens here: `rewind.rs` gathers the facts from the store, git and the disk, and
//! applies the plan. Keeping the decision apart is what lets a dry run say exactly what the
//! rewind would do, and lets the rules be tested on their own.

use std::path::PathBuf;

use super::Conflict;

/// A path's state at the checkpoint, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A regular file whose content is kept in the store.
    File {
        /// The pre-image in the store.
        blob: PathBuf,
        /// Permission bits.
        mode: u32,
    },
    /// A symbolic link.
    Symlink { target: PathBuf },
    /// It did not exist; `created_dirs` were made since, for it (shallowest first).
    Absent { created_dirs: Vec<PathBuf> },
    /// A blob of the checkpoint's git tree, with git's mode (`0o100644`, `0o100755`,
    /// `0o120000`).
    Git { oid: String, mode: u32 },
    /// Not in the checkpoint's git tree (and not ignored then).
    GitAbsent,
    /// Not known, and why in words.
    Unknown(String),
}

impl Target {
    fn is_absent(&self) -> bool {
        matches!(self, Target::Absent { .. } | Target::GitAbsent)
    }
}

/// What is known of one path.
#[derive(Debug, Clone)]
pub(crate) struct PathFacts {
    pub(crate) path: PathBuf,
    pub(crate) target: Target,
    /// Something is at the path now.
    pub(crate) exists: bool,
    /// What is there now already equals the target.
    pub(crate) matches_target: bool,
    /// What is there now is what the agent (or an earlier rewind) left.
    pub(crate) agent_left_it: bool,
    /// The span saw a change not made by the agent: what, in words.
    pub(crate) changed_by_user: Option<String>,
    /// Its change time is older than the checkpoint: nothing changed it since.
    pub(crate) untouched_since: bool,
}

/// What to do to one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Put the target (a file, a symlink, a git blob) at the path.
    Write(Target),
    /// Remove the file or symlink.
    Remove,
}

/// One change of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) path: PathBuf,
    pub(crate) action: Action,
}

/// What a rewind does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) steps: Vec<Step>,
    /// Every conflict: left alone, or overwritten when forced.
    pub(crate) conflicts: Vec<Conflict>,
    pub(crate) not_covered: Vec<String>,
    /// Directories created since, to remove when empty after the steps (deepest first).
    pub(crate) dirs: Vec<PathBuf>,
}

/// Decides what a rewind does with `facts`; with `force`, conflicts are overwritten.
///
/// The rules, in order: a path already in its checkpoint state is left; a path nothing
/// touched since the checkpoint is never written (git's view of it changed, not the file);
/// an unknown state is reported as not covered; a path the agent did not leave as it is now
/// (or that the user changed within the span) is a conflict; the rest is written back, or
/// removed when it did not exist.
pub(crate) fn plan(facts: Vec<PathFacts>, force: bool) -> Plan {
    let mut plan = Plan::default();
    for fact in facts {
        if let Target::Absent { created_dirs } = &fact.target {
            plan.dirs.extend(created_dirs.iter().cloned());
        }
        if fact.matches_target || (fact.target.is_absent() && !fact.exists) {
            continue;
        }
        if fact.untouched_since && fact.exists {
            plan.not_covered.push(format!(
                "{}: left as it is: it did not change since the checkpoint, but git's view \
                 of it did (were the ignore rules changed?)",
                fact.path.display()
            ));
            continue;
        }
        if let Target::Unknown(why) = &fact.target {
            plan.not_covered
                .push(format!("{}: {why}", fact.path.display()));
            continue;
        }
        let reason = match (&fact.changed_by_user, fact.agent_left_it) {
            (Some(reason), _) => Some(reason.clone()),
            (None, false) => Some("changed since the agent's last change to it".to_string()),
            (None, true) => None,
        };
        if let Some(reason) = reason {
            plan.conflicts.push(Conflict {
                path: fact.path.clone(),
                reason,
                overwritten: force,
            });
            if !force {
                continue;
            }
        }
        let action = if fact.target.is_absent() {
            Action::Remove
        } else {
            Action::Write(fact.target)
        };
        plan.steps.push(Step {
            path: fact.path,
            action,
        });
    }
    plan.dirs.sort();
    plan.dirs.dedup();
    plan.dirs.reverse(); // deepest first
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(path: &str, target: Target) -> PathFacts {
        PathFacts {
            path: PathBuf::from(path),
            target,
            exists: true,
            matches_target: false,
            agent_left_it: true,
            changed_by_user: None,
            untouched_since: false,
        }
    }

    fn blob() -> Target {
        Target::File {
            blob: PathBuf::from("/store/1/blobs/0"),
            mode: 0o644,
        }
    }

    #[test]
    fn what_the_agent_left_is_written_back_and_what_it_created_is_removed() {
        let created = Target::Absent {
            created_dirs: vec!["/w/new".into(), "/w/new/deep".into()],
        };
        let plan = plan(
            vec![fact("/w/a.txt", blob()), fact("/w/new/deep/b.txt", created)],
            false,
        );
        assert_eq!(
            plan.steps,
            [
                Step {
                    path: "/w/a.txt".into(),
                    action: Action::Write(blob())
                },
                Step {
                    path: "/w/new/deep/b.txt".into(),
                    action: Action::Remove
                },
            ]
        );
        assert_eq!(
            plan.dirs,
            [PathBuf::from("/w/new/deep"), PathBuf::from("/w/new")]
        );
        assert!(plan.conflicts.is_empty() && plan.not_covered.is_empty());
    }

    #[test]
    fn a_file_the_user_changed_is_a_conflict_left_alone_unless_forced() {
        let mut changed = fact("/w/a.txt", blob());
        changed.agent_left_it = false;
        let mut between = fact(
            "/w/b.txt",
            Target::Git {
                oid: "ab".into(),
                mode: 0o100644,
            },
        );
        between.changed_by_user = Some("changed between input 2 and input 3".into());
        let left = plan(vec![changed.clone(), between.clone()], false);
        assert!(left.steps.is_empty(), "nothing of the user's is written");
        assert_eq!(
            left.conflicts
                .iter()
                .map(|c| (c.path.to_str().unwrap(), c.overwritten))
                .collect::<Vec<_>>(),
            [("/w/a.txt", false), ("/w/b.txt", false)]
        );
        assert_eq!(
            left.conflicts[1].reason,
            "changed between input 2 and input 3"
        );

        let forced = plan(vec![changed, between], true);
        assert_eq!(forced.steps.len(), 2);
        assert!(forced.conflicts.iter().all(|c| c.overwritten));
    }

    #[test]
    fn nothing_is_done_to_paths_already_right_or_untouched_since_the_checkpoint() {
        let mut right = fact("/w/same.txt", blob());
        right.matches_target = true;
        right.agent_left_it = false; // even a user's change back to the original is fine
        let mut gone = fact("/w/never.txt", Target::GitAbsent);
        gone.exists = false;
        let mut untouched = fact("/w/build/out.o", Target::GitAbsent);
        untouched.untouched_since = true;
        let plan = plan(vec![right, gone, untouched], true);
        assert!(plan.steps.is_empty(), "{plan:?}");
        assert!(plan.conflicts.is_empty());
        assert_eq!(plan.not_covered.len(), 1);
        assert!(plan.not_covered[0].starts_with("/w/build/out.o: left as it is"));
    }

    #[test]
    fn unknown_states_are_reported_never_guessed() {
        let lost = fact(
            "/w/huge.bin",
            Target::Unknown("its pre-image was over the store's cap".into()),
        );
        let plan = plan(vec![lost], true);
        assert!(plan.steps.is_empty());
        assert_eq!(
            plan.not_covered,
            ["/w/huge.bin: its pre-image was over the store's cap"]
        );
    }
}
