//! RBAC decisions remembered per snapshot, so that a request like one already decided is
//! not resolved again (the bindings walked, their subjects compared, the rules matched and
//! the reason formatted).
//!
//! What enters: the snapshot the authorizer just got from [`super::cache::RbacCache`] (so a
//! write acknowledged before the request started is already in it), the request's user and
//! `RequestInfo`, and the uncached decision to run on a miss. What leaves: that decision,
//! or an equal one remembered for an equivalent request under the same snapshot.
//!
//! The key holds exactly what RBAC reads, with the names no object of the snapshot mentions
//! folded into one "any other" value, because the decision cannot tell them apart:
//! - the user name, only when a `User` subject names it or a `ServiceAccount` subject
//!   denotes it (`system:serviceaccount:<ns>:<name>`); the uid and extra are never read;
//! - the user's groups that some `Group` subject names, in the user's order;
//! - the verb; for resource requests the API group, resource and subresource, and the
//!   object name only when some rule lists it in `resourceNames`; for other requests the
//!   path;
//! - the namespace, only when it holds RoleBindings (otherwise only cluster bindings apply,
//!   as for a cluster-scoped request).
//!
//! Reasons and errors name bindings, roles and subjects of the snapshot, never the request,
//! so an equivalent request gets the same text. The memo is bounded (entries and bytes,
//! [`crate::machinery::memo`]); a flood of distinct names evicts, never grows it, and never
//! changes an answer (a hit compares the whole key).

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::rbac::v1::Subject;

use super::cache::Snapshot;
use crate::authz::{Attributes, Verdict};
use crate::machinery::memo::Memo;
use kustos_ca::users::SERVICE_ACCOUNT_USER_PREFIX;

/// Default bounds of the memo.
pub const MAX_ENTRIES: usize = 4096;
pub const MAX_BYTES: usize = 1 << 20;

/// The names a snapshot's objects mention, for folding request names.
#[derive(Debug, Default)]
pub struct Relevance {
    user_names: HashSet<String>,
    groups: HashSet<String>,
    resource_names: HashSet<String>,
    namespaces: HashSet<String>,
}

impl Relevance {
    /// Every user name a subject of `s` may apply to, every group a subject names, every
    /// `resourceNames` entry of a role, every namespace with RoleBindings.
    pub fn of(s: &Snapshot) -> Self {
        let mut r = Relevance::default();
        let subjects = s.cluster_role_bindings.iter().map(|b| ("", b.subjects.as_deref().unwrap_or_default())).chain(
            s.role_bindings
                .iter()
                .flat_map(|(ns, bs)| bs.iter().map(move |b| (ns.as_str(), b.subjects.as_deref().unwrap_or_default()))),
        );
        for (binding_ns, subjects) in subjects {
            for subject in subjects {
                r.add_subject(subject, binding_ns);
            }
        }
        let rules = s
            .cluster_roles
            .values()
            .flat_map(|c| c.rules.iter().flatten())
            .chain(s.roles.values().flat_map(|m| m.values()).flat_map(|role| role.rules.iter().flatten()));
        for rule in rules {
            r.resource_names.extend(rule.resource_names.iter().flatten().cloned());
        }
        r.namespaces = s.role_bindings.keys().cloned().collect();
        r
    }

    /// A superset of what `rules::applies_to_user` can match for this subject.
    fn add_subject(&mut self, subject: &Subject, binding_ns: &str) {
        match subject.kind.as_str() {
            "User" => {
                self.user_names.insert(subject.name.clone());
            }
            "Group" => {
                self.groups.insert(subject.name.clone());
            }
            "ServiceAccount" => {
                let ns = subject.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(binding_ns);
                self.user_names.insert(format!("{SERVICE_ACCOUNT_USER_PREFIX}{ns}:{}", subject.name));
            }
            _ => {}
        }
    }
}

/// A snapshot and the names it mentions.
pub struct Indexed {
    snapshot: Arc<Snapshot>,
    relevance: Relevance,
}

/// A request as the memo sees it: the fields RBAC reads, folded (borrowed; nothing allocated).
struct View<'a> {
    relevance: &'a Relevance,
    user: Option<&'a str>,
    groups: &'a [String],
    verb: &'a str,
    resource_request: bool,
    api_group: &'a str,
    resource: &'a str,
    subresource: &'a str,
    name: Option<&'a str>,
    namespace: Option<&'a str>,
    path: &'a str,
}

/// The owned form of a [`View`], stored with the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    user: Option<String>,
    groups: Vec<String>,
    verb: String,
    resource_request: bool,
    api_group: String,
    resource: String,
    subresource: String,
    name: Option<String>,
    namespace: Option<String>,
    path: String,
}

impl<'a> View<'a> {
    fn of(relevance: &'a Relevance, attrs: &Attributes<'a>) -> Self {
        let (user, info) = (attrs.user, attrs.info);
        let known = |set: &HashSet<String>, s: &'a str| set.contains(s).then_some(s);
        let resource_request = info.is_resource_request;
        let res = |s: &'a str| if resource_request { s } else { "" };
        View {
            relevance,
            user: known(&relevance.user_names, &user.name),
            groups: &user.groups,
            verb: &info.verb,
            resource_request,
            api_group: res(&info.api_group),
            resource: res(&info.resource),
            subresource: res(&info.subresource),
            name: if resource_request { known(&relevance.resource_names, &info.name) } else { None },
            namespace: known(&relevance.namespaces, &info.namespace),
            path: if resource_request { "" } else { &info.path },
        }
    }

    fn groups(&self) -> impl Iterator<Item = &'a String> + '_ {
        self.groups.iter().filter(|g| self.relevance.groups.contains(g.as_str()))
    }

    fn hash(&self, mut h: &mut dyn Hasher) {
        self.user.hash(&mut h);
        let mut n = 0usize;
        for g in self.groups() {
            g.hash(&mut h);
            n += 1;
        }
        n.hash(&mut h);
        (self.verb, self.resource_request, self.api_group, self.resource, self.subresource).hash(&mut h);
        (self.name, self.namespace, self.path).hash(&mut h);
    }

    fn same(&self, k: &Key) -> bool {
        k.user.as_deref() == self.user
            && k.verb == self.verb
            && k.resource_request == self.resource_request
            && k.api_group == self.api_group
            && k.resource == self.resource
            && k.subresource == self.subresource
            && k.name.as_deref() == self.name
            && k.namespace.as_deref() == self.namespace
            && k.path == self.path
            && k.groups.iter().eq(self.groups())
    }

    fn to_key(&self) -> Key {
        Key {
            user: self.user.map(str::to_string),
            groups: self.groups().cloned().collect(),
            verb: self.verb.to_string(),
            resource_request: self.resource_request,
            api_group: self.api_group.to_string(),
            resource: self.resource.to_string(),
            subresource: self.subresource.to_string(),
            name: self.name.map(str::to_string),
            namespace: self.namespace.map(str::to_string),
            path: self.path.to_string(),
        }
    }
}

impl Key {
    fn bytes(&self) -> usize {
        let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        opt(&self.user)
            + self.groups.iter().map(|g| g.len() + std::mem::size_of::<String>()).sum::<usize>()
            + self.verb.len()
            + self.api_group.len()
            + self.resource.len()
            + self.subresource.len()
            + opt(&self.name)
            + opt(&self.namespace)
            + self.path.len()
            + std::mem::size_of::<Key>()
    }
}

/// The memo of RBAC decisions.
pub struct Decisions {
    indexed: RwLock<Option<Arc<Indexed>>>,
    memo: Memo<Indexed, Key, Verdict>,
}

impl Decisions {
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        Decisions { indexed: RwLock::new(None), memo: Memo::new(max_entries, max_bytes) }
    }

    /// `snapshot` with the names it mentions (computed once per snapshot).
    fn indexed(&self, snapshot: &Arc<Snapshot>) -> Arc<Indexed> {
        {
            let guard = self.indexed.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(i) = guard.as_ref().filter(|i| Arc::ptr_eq(&i.snapshot, snapshot)) {
                return i.clone();
            }
        }
        let fresh = Arc::new(Indexed { snapshot: snapshot.clone(), relevance: Relevance::of(snapshot) });
        *self.indexed.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(fresh.clone());
        fresh
    }

    /// The decision for `attrs` under `snapshot`: remembered, or `decide`'s (then remembered).
    pub fn decide(
        &self,
        snapshot: &Arc<Snapshot>,
        attrs: &Attributes<'_>,
        decide: impl FnOnce() -> Verdict,
    ) -> Verdict {
        let indexed = self.indexed(snapshot);
        let view = View::of(&indexed.relevance, attrs);
        let hash = self.memo.hash(|h| view.hash(h));
        if let Some(v) = self.memo.get(&indexed, hash, |k| view.same(k)) {
            return v;
        }
        let verdict = decide();
        let key = view.to_key();
        let bytes = key.bytes() + verdict.reason.len() + verdict.error.len();
        self.memo.insert(&indexed, hash, key, verdict.clone(), bytes);
        verdict
    }

    /// Entries remembered, and the bytes they are counted for.
    pub fn usage(&self) -> (usize, usize) {
        self.memo.usage()
    }
}
