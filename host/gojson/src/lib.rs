//! Decode JSON into serde types the way Go's `encoding/json` decodes into
//! structs, which is how the reference CNI plugins and libcni read every
//! config, `runtimeConfig`, `prevResult`, IPAM section and `args`:
//!
//! * an object key names a struct field by its exact name first, then by a
//!   case-insensitive match (`"HostPort"` fills `hostPort`, as containerd's
//!   go-cni sends it, marshalled from Go structs without json tags);
//! * `null` leaves a field as if it were absent (Go: "unmarshaling null
//!   into a value that is not a pointer, map, slice or interface has no
//!   effect"), so `"ipMasq": null` is `false`, not an error; elsewhere (a
//!   map's value, a list's element) `null` is the type's zero value
//!   (`false`, `0`, `""`, an empty list or map), as Go stores it;
//! * keys no field names are ignored (unless the type says
//!   `deny_unknown_fields`).
//!
//! Everything else is serde's: the same types, the same messages
//! (`invalid type: string "big", expected u32`). Errors carry the path of
//! the offending value (`ranges[0][1].subnet`), with keys as the document
//! spells them.
//!
//! Where Go and this crate differ, on purpose or of necessity:
//! * several keys that name one field (`{"mtu": 1, "MTU": 2}`): Go keeps
//!   the last in document order; a [`serde_json::Map`] does not keep the
//!   order, so the exact key wins, else the first in byte order;
//! * case folding is Unicode lower-casing plus Go's two extra folds
//!   (`ſ`→`s`, Kelvin sign→`k`); Go uses simple case folding, which
//!   differs from this only for characters no CNI key uses;
//! * a type deserialized through `#[serde(flatten)]` is read with serde's
//!   own exact matching (serde hands flattened fields over as a map, with
//!   no field names to match against): keep Go-decoded types free of
//!   `flatten`.
//!
//! For code that reads a [`serde_json::Map`] by hand, [`field`] and
//! [`take_field`] look a key up with the same rules.

#![deny(missing_docs)]

use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};
use serde::{forward_to_deserialize_any, Deserializer};
use serde_json::{Map, Value};

/// Decode `value` into `T` with Go's key matching (see the crate docs).
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, Error> {
    T::deserialize(Decoder(value))
}

/// The value Go's decoder would put into a struct field named `name`:
/// the exact key's, else that of a key equal to `name` under case folding;
/// `null` counts as absent.
pub fn field<'a>(map: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    match map.get(name) {
        Some(v) if !v.is_null() => Some(v),
        _ => map
            .iter()
            .find(|(k, v)| !v.is_null() && fold_eq(k, name))
            .map(|(_, v)| v),
    }
}

/// Like [`field`], but takes the value out of `map`, and with it every
/// other key that names the same field (Go reads them all into the one
/// field, so none of them is left over as an unknown key).
pub fn take_field(map: &mut Map<String, Value>, name: &str) -> Option<Value> {
    let exact = map.remove(name).filter(|v| !v.is_null());
    // Other spellings are rare: look for them without allocating first.
    if !map.keys().any(|k| fold_eq(k, name)) {
        return exact;
    }
    let others: Vec<String> = map.keys().filter(|k| fold_eq(k, name)).cloned().collect();
    let mut folded = None;
    for key in others {
        if let Some(v) = map.remove(&key).filter(|v| !v.is_null()) {
            folded.get_or_insert(v);
        }
    }
    exact.or(folded)
}

/// Whether two keys are equal as Go's `encoding/json` compares a key with
/// a field name (case-insensitively; see the crate docs).
pub fn fold_eq(a: &str, b: &str) -> bool {
    if a.is_ascii() && b.is_ascii() {
        return a.eq_ignore_ascii_case(b);
    }
    fn folded(s: &str) -> impl Iterator<Item = char> + '_ {
        s.chars().flat_map(char::to_lowercase).map(|c| match c {
            'ſ' => 's',
            c => c,
        })
    }
    folded(a).eq(folded(b))
}

/// A decode failure: the message and the path of the value it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Innermost segment first (errors are wrapped on their way out).
    segments: Vec<Segment>,
    message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

impl Error {
    /// The path of the offending value (`ranges[0][1].subnet`), keys as the
    /// document spells them; empty for the root.
    pub fn path(&self) -> String {
        let mut out = String::new();
        for seg in self.segments.iter().rev() {
            match seg {
                Segment::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Segment::Index(i) => {
                    out.push('[');
                    out.push_str(&i.to_string());
                    out.push(']');
                }
            }
        }
        out
    }

    /// serde's message (`invalid type: null, expected u32`).
    pub fn message(&self) -> &str {
        &self.message
    }

    fn within(mut self, seg: Segment) -> Error {
        self.segments.push(seg);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path();
        if path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "field \"{path}\": {}", self.message)
        }
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error {
            segments: Vec::new(),
            message: msg.to_string(),
        }
    }
}

fn unexpected(v: &Value) -> Unexpected<'_> {
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Unexpected::Unsigned(u),
            (None, Some(i)) => Unexpected::Signed(i),
            _ => Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// Typed requests for which `null` gives the zero value, as Go stores it
/// in a map's value or a list's element (in a struct, `null` fields are
/// left out before this: [`Entries::for_struct`]).
macro_rules! null_is_zero {
    ($($method:ident => $visit:ident($zero:expr)),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self.0 {
                Value::Null => visitor.$visit($zero),
                _ => self.deserialize_any(visitor),
            }
        }
    )*};
}

/// A serde deserializer over a borrowed JSON value with Go's key matching.
struct Decoder<'de>(&'de Value);

impl<'de> Deserializer<'de> for Decoder<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => visitor.visit_u64(u),
                (None, Some(i)) => visitor.visit_i64(i),
                _ => visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => {
                let mut seq = Items {
                    items: items.iter().enumerate(),
                };
                let out = visitor.visit_seq(&mut seq)?;
                match seq.items.len() {
                    0 => Ok(out),
                    _ => Err(de::Error::invalid_length(
                        items.len(),
                        &"fewer elements in array",
                    )),
                }
            }
            Value::Object(map) => visitor.visit_map(Entries::all(map)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(Entries::for_struct(map, fields)),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(BorrowedStrDeserializer::<Error>::new(s)),
            Value::Object(map) if map.len() == 1 => {
                let (key, value) = map.iter().next().expect("one entry");
                visitor.visit_enum(Variant { key, value })
            }
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    null_is_zero! {
        deserialize_bool => visit_bool(false),
        deserialize_i8 => visit_i64(0), deserialize_i16 => visit_i64(0),
        deserialize_i32 => visit_i64(0), deserialize_i64 => visit_i64(0),
        deserialize_u8 => visit_u64(0), deserialize_u16 => visit_u64(0),
        deserialize_u32 => visit_u64(0), deserialize_u64 => visit_u64(0),
        deserialize_f32 => visit_f64(0.0), deserialize_f64 => visit_f64(0.0),
        deserialize_str => visit_borrowed_str(""), deserialize_string => visit_borrowed_str("")
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_seq(Items {
                items: [].iter().enumerate(),
            }),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_map(Entries {
                entries: Vec::new().into_iter(),
                pending: None,
            }),
            _ => self.deserialize_any(visitor),
        }
    }

    forward_to_deserialize_any! {
        i128 u128 char bytes byte_buf unit unit_struct tuple tuple_struct identifier
    }
}

/// The elements of an array, each decoded with its index on the path.
struct Items<'de> {
    items: std::iter::Enumerate<std::slice::Iter<'de, Value>>,
}

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.items.next() {
            None => Ok(None),
            Some((i, v)) => seed
                .deserialize(Decoder(v))
                .map(Some)
                .map_err(|e| e.within(Segment::Index(i))),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// One entry handed to serde: the name serde matches (a field's name, or
/// the key itself), the key as the document spells it (for error paths),
/// and the value.
type Entry<'de> = (&'de str, &'de str, &'de Value);

/// The entries of an object, as a map or as a struct's fields.
struct Entries<'de> {
    entries: std::vec::IntoIter<Entry<'de>>,
    pending: Option<Entry<'de>>,
}

impl<'de> Entries<'de> {
    fn all(map: &'de Map<String, Value>) -> Entries<'de> {
        let entries: Vec<Entry<'de>> = map
            .iter()
            .map(|(k, v)| (k.as_str(), k.as_str(), v))
            .collect();
        Entries {
            entries: entries.into_iter(),
            pending: None,
        }
    }

    /// Go's matching of keys to `fields`: exact, else case-insensitive;
    /// `null` entries left out; one entry per field (see the crate docs).
    fn for_struct(map: &'de Map<String, Value>, fields: &'static [&'static str]) -> Entries<'de> {
        let mut entries = Vec::with_capacity(map.len());
        let mut folded: Vec<&'static str> = Vec::new();
        for (key, value) in map {
            if value.is_null() {
                continue;
            }
            if fields.contains(&key.as_str()) {
                entries.push((key.as_str(), key.as_str(), value));
                continue;
            }
            match fields.iter().find(|f| fold_eq(f, key)) {
                // The exact key names this field; it wins.
                Some(f) if map.get(*f).is_some_and(|v| !v.is_null()) => {}
                // An earlier key (in byte order) names it already.
                Some(f) if folded.contains(f) => {}
                Some(f) => {
                    folded.push(f);
                    entries.push((f, key.as_str(), value));
                }
                None => entries.push((key.as_str(), key.as_str(), value)),
            }
        }
        Entries {
            entries: entries.into_iter(),
            pending: None,
        }
    }
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.entries.next() {
            None => Ok(None),
            Some(entry) => {
                self.pending = Some(entry);
                seed.deserialize(Key(entry.0))
                    .map(Some)
                    .map_err(|e| e.within(Segment::Key(entry.1.to_owned())))
            }
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        let (_, key, value) = self.pending.take().ok_or_else(|| {
            <Error as de::Error>::custom("a map value was asked for before its key")
        })?;
        seed.deserialize(Decoder(value))
            .map_err(|e| e.within(Segment::Key(key.to_owned())))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An object key: a string, or a number spelled as one for integer-keyed
/// maps (as serde_json reads map keys).
struct Key<'de>(&'de str);

macro_rules! integer_key {
    ($($method:ident $visit:ident $ty:ty),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self.0.parse::<$ty>() {
                Ok(n) => visitor.$visit(n),
                Err(_) => Err(de::Error::invalid_value(Unexpected::Str(self.0), &visitor)),
            }
        }
    )*};
}

impl<'de> Deserializer<'de> for Key<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_borrowed_str(self.0)
    }

    integer_key! {
        deserialize_i8 visit_i8 i8, deserialize_i16 visit_i16 i16,
        deserialize_i32 visit_i32 i32, deserialize_i64 visit_i64 i64,
        deserialize_u8 visit_u8 u8, deserialize_u16 visit_u16 u16,
        deserialize_u32 visit_u32 u32, deserialize_u64 visit_u64 u64
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(BorrowedStrDeserializer::<Error>::new(self.0))
    }

    forward_to_deserialize_any! {
        bool i128 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

/// An externally tagged enum value: `{"variant": value}`.
struct Variant<'de> {
    key: &'de str,
    value: &'de Value,
}

impl<'de> EnumAccess<'de> for Variant<'de> {
    type Error = Error;
    type Variant = Decoder<'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Decoder<'de>), Error> {
        let tag = seed.deserialize(BorrowedStrDeserializer::<Error>::new(self.key))?;
        Ok((tag, Decoder(self.value)))
    }
}

impl<'de> VariantAccess<'de> for Decoder<'de> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.0 {
            Value::Null => Ok(()),
            other => Err(de::Error::invalid_type(unexpected(other), &"unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_struct("", fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct PortMapping {
        host_port: u16,
        container_port: u16,
        #[serde(default)]
        protocol: String,
        #[serde(default, rename = "hostIP")]
        host_ip: String,
    }

    #[derive(Debug, Deserialize, PartialEq, Default)]
    #[serde(default)]
    struct Conf {
        #[serde(rename = "ipMasq")]
        ip_masq: bool,
        mtu: u32,
        #[serde(rename = "portMappings")]
        port_mappings: Vec<PortMapping>,
        sysctl: BTreeMap<String, String>,
        mode: Option<Mode>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        Bridge,
        Private,
    }

    #[test]
    fn go_field_names_fill_json_tagged_fields() {
        // containerd's go-cni marshals port mappings without json tags.
        let v = json!({"portMappings": [
            {"HostPort": 8080, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""}]});
        let c: Conf = from_value(&v).unwrap();
        assert_eq!(
            c.port_mappings,
            vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: "tcp".into(),
                host_ip: String::new()
            }]
        );
        let c: Conf =
            from_value(&json!({"IPMASQ": true, "Mtu": 1400, "PortMappings": []})).unwrap();
        assert!(c.ip_masq);
        assert_eq!(c.mtu, 1400);
    }

    #[test]
    fn exact_key_wins_over_a_folded_one() {
        let c: Conf = from_value(&json!({"MTU": 1, "mtu": 2, "Mtu": 3})).unwrap();
        assert_eq!(c.mtu, 2);
        // No exact key: the first in byte order ("MTU" < "Mtu").
        let c: Conf = from_value(&json!({"Mtu": 3, "MTU": 1})).unwrap();
        assert_eq!(c.mtu, 1);
    }

    #[test]
    fn null_is_absent_and_unknown_keys_are_ignored() {
        let c: Conf = from_value(&json!({"ipMasq": null, "mtu": null, "x": {"y": 1}})).unwrap();
        assert_eq!(c, Conf::default());
        // A folded key's null does not hide the exact key's value.
        let c: Conf = from_value(&json!({"MTU": null, "mtu": 9})).unwrap();
        assert_eq!(c.mtu, 9);
    }

    #[test]
    fn null_in_a_map_or_a_list_is_the_zero_value() {
        let m: BTreeMap<String, bool> = from_value(&json!({"portMappings": null})).unwrap();
        assert_eq!(m.get("portMappings"), Some(&false));
        let m: BTreeMap<String, String> = from_value(&json!({"net.x": null})).unwrap();
        assert_eq!(m.get("net.x").map(String::as_str), Some(""));
        let v: Vec<u32> = from_value(&json!([1, null])).unwrap();
        assert_eq!(v, [1, 0]);
        let v: Vec<Vec<u8>> = from_value(&json!([null])).unwrap();
        assert_eq!(v, [Vec::<u8>::new()]);
        let o: Option<u8> = from_value(&json!(null)).unwrap();
        assert_eq!(o, None);
        let v: Value = from_value(&json!({"a": null})).unwrap();
        assert_eq!(v, json!({"a": null}));
    }

    #[test]
    fn map_keys_and_enum_values_stay_exact() {
        let c: Conf =
            from_value(&json!({"sysctl": {"Net.IPv4.x": "1"}, "mode": "bridge"})).unwrap();
        assert_eq!(c.sysctl.keys().collect::<Vec<_>>(), ["Net.IPv4.x"]);
        assert_eq!(c.mode, Some(Mode::Bridge));
        let e = from_value::<Conf>(&json!({"mode": "Bridge"})).unwrap_err();
        assert_eq!(e.path(), "mode");
    }

    #[test]
    fn errors_name_the_path_as_the_document_spells_it() {
        let e = from_value::<Conf>(&json!({"portMappings": [
            {"hostPort": 1, "containerPort": 2}, {"HostPort": "x", "containerPort": 2}]}))
        .unwrap_err();
        assert_eq!(e.path(), "portMappings[1].HostPort");
        assert_eq!(e.message(), "invalid type: string \"x\", expected u16");
        assert_eq!(
            e.to_string(),
            "field \"portMappings[1].HostPort\": invalid type: string \"x\", expected u16"
        );
        let e = from_value::<PortMapping>(&json!({"hostPort": 1})).unwrap_err();
        assert_eq!(e.to_string(), "missing field `containerPort`");
        let e = from_value::<Conf>(&json!({"mtu": -1})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "field \"mtu\": invalid value: integer `-1`, expected u32"
        );
    }

    #[test]
    fn lookups_by_hand_follow_the_same_rules() {
        let v = json!({"HostIP": "1.2.3.4", "hostPort": null, "HOSTPORT": 80});
        let m = v.as_object().unwrap();
        assert_eq!(field(m, "hostIP"), Some(&json!("1.2.3.4")));
        assert_eq!(field(m, "hostPort"), Some(&json!(80)));
        assert_eq!(field(m, "protocol"), None);
        let mut m = m.clone();
        assert_eq!(take_field(&mut m, "hostPort"), Some(json!(80)));
        assert_eq!(m.len(), 1);
        assert!(fold_eq("ſnat", "SNAT"));
        assert!(fold_eq("\u{212a}ey", "key"));
        assert!(!fold_eq("keys", "key"));
    }

    #[test]
    fn arrays_report_extra_elements_and_tuples_work() {
        let t: (u8, String) = from_value(&json!([1, "a"])).unwrap();
        assert_eq!(t, (1, "a".into()));
        assert!(from_value::<(u8,)>(&json!([1, 2])).is_err());
        let m: BTreeMap<u32, bool> = from_value(&json!({"7": true})).unwrap();
        assert_eq!(m.get(&7), Some(&true));
    }
}
