//! Finds keys that appear twice in one JSON object (for `fieldValidation` "duplicate field"),
//! which a plain `serde_json::Value` decode silently collapses.

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// Dotted paths of duplicated keys in `body` (empty if none or if the body is not JSON).
pub fn duplicate_keys(body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let _ = Walk { path: String::new(), out: &mut out }.deserialize(&mut de);
    out
}

struct Walk<'a> {
    path: String,
    out: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let path = format!("{}[{i}]", self.path);
            if seq.next_element_seed(Walk { path, out: &mut *self.out })?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(k) = map.next_key::<String>()? {
            let path = if self.path.is_empty() { k.clone() } else { format!("{}.{k}", self.path) };
            if !seen.insert(k) {
                self.out.push(path.clone());
            }
            map.next_value_seed(Walk { path, out: &mut *self.out })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_duplicates_at_any_depth() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("none", r#"{"a":1,"b":{"c":2}}"#, &[]),
            ("top level", r#"{"a":1,"a":2}"#, &["a"]),
            ("nested", r#"{"metadata":{"name":"x","name":"y"}}"#, &["metadata.name"]),
            ("in list", r#"{"items":[{"k":1,"k":1}]}"#, &["items[0].k"]),
            ("not json", "{{", &[]),
        ];
        for (name, body, want) in cases {
            assert_eq!(duplicate_keys(body.as_bytes()), *want, "{name}");
        }
    }
}
