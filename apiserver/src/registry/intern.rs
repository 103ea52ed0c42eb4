//! Interned names for kinds registered at runtime (custom resources).
//!
//! `ResourceDef` keeps `&'static str` names so that the built-in kinds cost nothing per
//! request. Names that come from a CustomResourceDefinition are interned here: each distinct
//! string (or list of strings) is leaked once and reused forever after, so re-creating or
//! updating CRDs never grows memory beyond the set of distinct names ever served.

use std::collections::HashSet;
use std::sync::Mutex;

static STRINGS: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
static LISTS: Mutex<Option<HashSet<&'static [&'static str]>>> = Mutex::new(None);

/// The one `'static` copy of `s`.
pub fn intern(s: &str) -> &'static str {
    let mut guard = STRINGS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let set = guard.get_or_insert_with(HashSet::new);
    if let Some(found) = set.get(s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(leaked);
    leaked
}

/// The one `'static` copy of a list of names (each name interned too).
pub fn intern_list<S: AsRef<str>>(items: &[S]) -> &'static [&'static str] {
    let names: Vec<&'static str> = items.iter().map(|s| intern(s.as_ref())).collect();
    if names.is_empty() {
        return &[];
    }
    let mut guard = LISTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let set = guard.get_or_insert_with(HashSet::new);
    if let Some(found) = set.get(names.as_slice()) {
        return found;
    }
    let leaked: &'static [&'static str] = Box::leak(names.into_boxed_slice());
    set.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_share_one_copy() {
        let a = intern(&String::from("widgets.kustos.dev"));
        let b = intern(&String::from("widgets.kustos.dev"));
        assert!(std::ptr::eq(a, b), "same string interned twice must be one allocation");
        let l1 = intern_list(&["w", "wd"]);
        let l2 = intern_list(&[String::from("w"), String::from("wd")]);
        assert!(std::ptr::eq(l1, l2), "same list interned twice must be one allocation");
        assert_eq!(l1, &["w", "wd"]);
    }
}
