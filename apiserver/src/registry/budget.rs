//! Typed decoding within a memory budget.
//!
//! Enters: an object's JSON (`serde_json::Value`) and the typed model to decode it into.
//! Leaves: the typed value, or an error once decoding would build more than the budget.
//!
//! A typed struct can be far bigger than the JSON that makes it: `{}` (two bytes) in a Pod's
//! `containers` is a whole `Container` (over a kilobyte, every optional field inline), and a
//! one-entry map of schemas allocates a B-tree node of eleven of them. A 3 MiB body of empty
//! elements would become gigabytes. [`from_value`] wraps the JSON deserializer and charges,
//! before each element of a sequence or each entry of a map is built, the inline size of what
//! will be built (`size_of` of the element, twice over for a vector's growth; a whole B-tree
//! node for a map's first entry) and the bytes of every string, and fails the decode when the
//! charges pass the budget. Struct fields are charged too (they are map values to serde), so
//! the estimate errs high, never low.

use std::cell::Cell;
use std::fmt;
use std::mem::size_of;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};

/// Typed bytes a decode may build per byte of the object's JSON, by default.
pub const BYTES_PER_JSON_BYTE: usize = 8;
/// Typed bytes any decode may build, whatever the object's size.
pub const BASE_BYTES: usize = 16 << 20;
/// Slots of a B-tree node (std's `B`: 2 * 6 - 1).
const BTREE_NODE_SLOTS: usize = 11;

/// The budget of an object whose JSON is `json_len` bytes, at `per_byte` typed bytes per
/// byte of it.
pub fn budget_for(json_len: usize, per_byte: usize) -> usize {
    json_len.saturating_mul(per_byte).saturating_add(BASE_BYTES)
}

/// The length of `v`'s compact JSON, without building it.
pub fn json_len(v: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Decode `v` into `T`, failing once the typed value would take more than `budget` bytes.
pub fn from_value<T: de::DeserializeOwned>(v: &serde_json::Value, budget: usize) -> Result<T, serde_json::Error> {
    let left = Cell::new(budget);
    T::deserialize(Budgeted { inner: v, left: &left, budget })
}

/// Take `bytes` from what is left, or fail.
fn charge<E: de::Error>(left: &Cell<usize>, budget: usize, bytes: usize) -> Result<(), E> {
    match left.get().checked_sub(bytes) {
        Some(rest) => {
            left.set(rest);
            Ok(())
        }
        None => {
            left.set(0);
            Err(E::custom(format_args!("the object needs more than {budget} bytes of memory once decoded")))
        }
    }
}

struct Budgeted<'b, D> {
    inner: D,
    left: &'b Cell<usize>,
    budget: usize,
}

impl<'b, D> Budgeted<'b, D> {
    fn visitor<V>(&self, inner: V, map: bool) -> Visit<'b, V> {
        Visit { inner, left: self.left, budget: self.budget, map }
    }
}

macro_rules! forward {
    ($($method:ident ( $($arg:ident : $ty:ty),* ) $map:expr;)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Self::Error> {
                let v = self.visitor(visitor, $map);
                self.inner.$method($($arg,)* v)
            }
        )*
    };
}

impl<'de, 'b, D: Deserializer<'de>> Deserializer<'de> for Budgeted<'b, D> {
    type Error = D::Error;

    forward! {
        deserialize_any() false;
        deserialize_bool() false;
        deserialize_i8() false;
        deserialize_i16() false;
        deserialize_i32() false;
        deserialize_i64() false;
        deserialize_i128() false;
        deserialize_u8() false;
        deserialize_u16() false;
        deserialize_u32() false;
        deserialize_u64() false;
        deserialize_u128() false;
        deserialize_f32() false;
        deserialize_f64() false;
        deserialize_char() false;
        deserialize_str() false;
        deserialize_string() false;
        deserialize_bytes() false;
        deserialize_byte_buf() false;
        deserialize_option() false;
        deserialize_unit() false;
        deserialize_unit_struct(name: &'static str) false;
        deserialize_newtype_struct(name: &'static str) false;
        deserialize_seq() false;
        deserialize_tuple(len: usize) false;
        deserialize_tuple_struct(name: &'static str, len: usize) false;
        deserialize_map() true;
        deserialize_struct(name: &'static str, fields: &'static [&'static str]) false;
        deserialize_enum(name: &'static str, variants: &'static [&'static str]) false;
        deserialize_identifier() false;
        deserialize_ignored_any() false;
    }
}

/// Wraps a visitor: strings are charged, and sequences, maps, options, newtypes and enums
/// it is handed are wrapped in turn.
struct Visit<'b, V> {
    inner: V,
    left: &'b Cell<usize>,
    budget: usize,
    /// Visiting a map (`deserialize_map`), not a struct: its entries live in B-tree nodes.
    map: bool,
}

impl<'b, V> Visit<'b, V> {
    fn wrap<D>(&self, inner: D) -> Budgeted<'b, D> {
        Budgeted { inner, left: self.left, budget: self.budget }
    }
}

macro_rules! pass {
    ($($method:ident ( $ty:ty );)*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, 'b, V: Visitor<'de>> Visitor<'de> for Visit<'b, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    pass! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        charge(self.left, self.budget, v.len())?;
        self.inner.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        charge(self.left, self.budget, v.len())?;
        self.inner.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        charge(self.left, self.budget, v.len())?;
        self.inner.visit_string(v)
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
        charge(self.left, self.budget, v.len())?;
        self.inner.visit_bytes(v)
    }

    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Self::Value, E> {
        charge(self.left, self.budget, v.len())?;
        self.inner.visit_borrowed_bytes(v)
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
        charge(self.left, self.budget, v.len())?;
        self.inner.visit_byte_buf(v)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let w = self.wrap(d);
        self.inner.visit_some(w)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let w = self.wrap(d);
        self.inner.visit_newtype_struct(w)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_seq(Seq { inner: seq, left: self.left, budget: self.budget })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let node = if self.map { BTREE_NODE_SLOTS } else { 0 };
        self.inner.visit_map(Map { inner: map, left: self.left, budget: self.budget, node, key: 0 })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_enum(Enum { inner: data, left: self.left, budget: self.budget })
    }
}

/// A seed whose deserializer is wrapped.
struct Seed<'b, S> {
    inner: S,
    left: &'b Cell<usize>,
    budget: usize,
}

impl<'de, 'b, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<'b, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.deserialize(Budgeted { inner: d, left: self.left, budget: self.budget })
    }
}

struct Seq<'b, A> {
    inner: A,
    left: &'b Cell<usize>,
    budget: usize,
}

impl<'de, 'b, A: SeqAccess<'de>> SeqAccess<'de> for Seq<'b, A> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Self::Error> {
        // A vector grows by doubling: up to twice its elements' size at once.
        charge(self.left, self.budget, 2 * size_of::<S::Value>().max(1))?;
        self.inner.next_element_seed(Seed { inner: seed, left: self.left, budget: self.budget })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

struct Map<'b, A> {
    inner: A,
    left: &'b Cell<usize>,
    budget: usize,
    /// Slots to charge for the next entry: a whole node for a map's first one.
    node: usize,
    /// `size_of` the last key, charged with its value.
    key: usize,
}

impl<'de, 'b, A: MapAccess<'de>> MapAccess<'de> for Map<'b, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Self::Error> {
        self.key = size_of::<K::Value>();
        self.inner.next_key_seed(Seed { inner: seed, left: self.left, budget: self.budget })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Self::Error> {
        let slot = self.key + size_of::<V::Value>();
        let slots = self.node.max(1);
        self.node = 0;
        charge(self.left, self.budget, slot.saturating_mul(slots))?;
        self.inner.next_value_seed(Seed { inner: seed, left: self.left, budget: self.budget })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

struct Enum<'b, A> {
    inner: A,
    left: &'b Cell<usize>,
    budget: usize,
}

impl<'de, 'b, A: EnumAccess<'de>> EnumAccess<'de> for Enum<'b, A> {
    type Error = A::Error;
    type Variant = Variant<'b, A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self::Variant), Self::Error> {
        let (left, budget) = (self.left, self.budget);
        let (v, variant) = self.inner.variant_seed(Seed { inner: seed, left, budget })?;
        Ok((v, Variant { inner: variant, left, budget }))
    }
}

struct Variant<'b, A> {
    inner: A,
    left: &'b Cell<usize>,
    budget: usize,
}

impl<'de, 'b, A: VariantAccess<'de>> VariantAccess<'de> for Variant<'b, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), Self::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, Self::Error> {
        self.inner.newtype_variant_seed(Seed { inner: seed, left: self.left, budget: self.budget })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Self::Error> {
        let v = Visit { inner: visitor, left: self.left, budget: self.budget, map: false };
        self.inner.tuple_variant(len, v)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let v = Visit { inner: visitor, left: self.left, budget: self.budget, map: false };
        self.inner.struct_variant(fields, v)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1 as corev1;
    use serde_json::json;

    use super::*;

    fn empties(n: usize) -> serde_json::Value {
        serde_json::Value::Array(vec![json!({}); n])
    }

    #[test]
    fn typed_objects_decode_within_their_budget() {
        let pod = json!({"metadata": {"name": "p", "labels": {"a": "b"}, "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]},
                         "spec": {"containers": [{"name": "c", "image": "i", "args": ["a", "b"], "ports": [{"containerPort": 80}]}]}});
        let budget = budget_for(json_len(&pod), BYTES_PER_JSON_BYTE);
        let typed: corev1::Pod = from_value(&pod, budget).unwrap();
        let plain: corev1::Pod = serde_json::from_value(pod.clone()).unwrap();
        assert_eq!(typed, plain);
        let cm = json!({"data": {"k": "v"}, "binaryData": {"b": "aGk="}});
        let typed: corev1::ConfigMap = from_value(&cm, budget_for(json_len(&cm), BYTES_PER_JSON_BYTE)).unwrap();
        assert_eq!(typed, serde_json::from_value::<corev1::ConfigMap>(cm).unwrap());
    }

    #[test]
    fn empty_elements_of_big_structs_exhaust_the_budget() {
        // (what, object, budget): each is a few KB of JSON that would be far more typed.
        let cases: Vec<(&str, serde_json::Value)> = vec![
            ("containers", json!({"spec": {"containers": empties(200_000)}})),
            ("ownerReferences", json!({"metadata": {"ownerReferences": empties(200_000)}})),
            ("managedFields", json!({"metadata": {"managedFields": empties(200_000)}})),
        ];
        for (what, obj) in cases {
            let len = json_len(&obj);
            let err = from_value::<corev1::Pod>(&obj, len * BYTES_PER_JSON_BYTE).unwrap_err();
            assert!(err.to_string().contains("once decoded"), "{what}: {err}");
        }
    }

    #[test]
    fn the_typed_roundtrip_refuses_lists_of_empty_structs() {
        // 300 KB of `{}`: 100k Containers (over 100 MB) without the budget.
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": empties(100_000)}});
        let err = crate::registry::typed_roundtrip::<corev1::Pod>(&pod).unwrap_err();
        assert!(err.to_string().contains("once decoded"), "{err}");
        // A pod with a few hundred real containers is fine.
        let containers: Vec<_> = (0..300).map(|i| json!({"name": format!("c{i}"), "image": "i"})).collect();
        let pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}});
        assert_eq!(crate::registry::typed_roundtrip::<corev1::Pod>(&pod).unwrap(), pod);
    }

    #[test]
    fn the_charge_counts_what_is_built() {
        // 1,000 empty containers: at least 1,000 Containers' worth.
        let obj = json!({"spec": {"containers": empties(1000)}});
        let enough = 4 * 1000 * size_of::<corev1::Container>() + (1 << 20);
        let _: corev1::Pod = from_value(&obj, enough).unwrap();
        assert!(from_value::<corev1::Pod>(&obj, 1000 * size_of::<corev1::Container>()).is_err());
        // Maps pay a whole node for their first entry.
        let maps = json!((0..1000).map(|i| (format!("k{i}"), json!({"x": "y"}))).collect::<BTreeMap<_, _>>());
        let one_node = BTREE_NODE_SLOTS * (size_of::<String>() * 2);
        assert!(from_value::<BTreeMap<String, BTreeMap<String, String>>>(&maps, 1000 * one_node).is_err());
        let _: BTreeMap<String, BTreeMap<String, String>> = from_value(&maps, 4 * 1000 * one_node).unwrap();
        // Strings pay their bytes.
        let s = json!("x".repeat(10_000));
        assert!(from_value::<String>(&s, 9_999).is_err());
        assert_eq!(from_value::<String>(&s, 10_000).unwrap().len(), 10_000);
    }

    #[test]
    fn json_len_is_the_compact_length() {
        let v = json!({"a": [1, "b", null], "c": {"d": true}});
        assert_eq!(json_len(&v), serde_json::to_vec(&v).unwrap().len());
    }
}
