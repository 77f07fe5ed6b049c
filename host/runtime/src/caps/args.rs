//! How a host call's arguments read in its audit record. The record's
//! `args` object has one key per parameter of the WIT function, named as
//! the WIT names it (the row's [`Entry::args`], checked against `wit/` by a
//! catalog test), and each value reads as its type says ([`AuditArg`]):
//! a namespace handle as `"host"`/`"container"`, a string cut at 256
//! bytes, a byte payload as its size, a WIT record as an object of its
//! fields. A host function hands its arguments to [`StoreData::cap`] as a
//! tuple, in WIT order; no host function builds its record by hand.
//!
//! [`StoreData::cap`]: super::ctx::StoreData::cap

use serde_json::{Map, Value};

use super::bindings::ip_from_wit;
use super::bindings::wasmcni::plugin::types::{IpAddress, IpFamily, IpPrefix};
use super::row::Entry;
use crate::netns::Kind;

/// How one argument reads in an audit record.
pub(crate) trait AuditArg {
    /// The argument's JSON value.
    fn audit(&self) -> Value;
}

/// A host call's arguments, in WIT order: a tuple of [`AuditArg`]s.
pub(crate) trait AuditArgs {
    /// How many arguments.
    const LEN: usize;
    /// The `args` object of the call's audit record, keyed by the row's
    /// parameter names.
    fn audit(&self, row: &Entry) -> Value;
}

/// A string, cut at 256 bytes (on a character boundary), followed by
/// `... (N bytes)` with its whole length.
pub(crate) fn arg_str(s: &str) -> Value {
    const MAX: usize = 256;
    if s.len() <= MAX {
        return Value::from(s);
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Value::from(format!("{}... ({} bytes)", &s[..end], s.len()))
}

/// A byte payload the record does not hold (a state value, a delegate's
/// config): `{"bytes": N}`.
pub(crate) struct Size(pub usize);

impl AuditArg for Size {
    fn audit(&self) -> Value {
        serde_json::json!({ "bytes": self.0 })
    }
}

/// A value that reads as its `Debug` form (a WIT enum: `Ipv4`, `Bridge`).
pub(crate) struct Named<T>(pub T);

impl<T: std::fmt::Debug> AuditArg for Named<T> {
    fn audit(&self) -> Value {
        Value::from(format!("{:?}", self.0))
    }
}

/// An object of named fields: a WIT record, field by field.
pub(crate) fn fields<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<Map<_, _>>(),
    )
}

impl AuditArg for Kind {
    fn audit(&self) -> Value {
        Value::from(self.name())
    }
}

impl AuditArg for str {
    fn audit(&self) -> Value {
        arg_str(self)
    }
}

impl AuditArg for String {
    fn audit(&self) -> Value {
        arg_str(self)
    }
}

macro_rules! audit_as_number {
    ($($t:ty),*) => {$(
        impl AuditArg for $t {
            fn audit(&self) -> Value {
                Value::from(*self)
            }
        }
    )*};
}
audit_as_number!(bool, u8, u16, u32, u64, usize);

impl AuditArg for IpFamily {
    fn audit(&self) -> Value {
        Named(self).audit()
    }
}

impl AuditArg for IpAddress {
    fn audit(&self) -> Value {
        Value::from(ip_from_wit(*self).to_string())
    }
}

impl AuditArg for IpPrefix {
    fn audit(&self) -> Value {
        Value::from(format!("{}/{}", ip_from_wit(self.address), self.prefix_len))
    }
}

impl<T: AuditArg + ?Sized> AuditArg for &T {
    fn audit(&self) -> Value {
        (**self).audit()
    }
}

impl<T: AuditArg> AuditArg for Option<T> {
    fn audit(&self) -> Value {
        self.as_ref().map_or(Value::Null, AuditArg::audit)
    }
}

impl AuditArgs for () {
    const LEN: usize = 0;
    fn audit(&self, _: &Entry) -> Value {
        Value::Object(Map::new())
    }
}

macro_rules! audit_tuple {
    ($len:expr; $($t:ident $i:tt),+) => {
        impl<$($t: AuditArg),+> AuditArgs for ($($t,)+) {
            const LEN: usize = $len;
            fn audit(&self, row: &Entry) -> Value {
                let mut args = Map::new();
                $(
                    args.insert(
                        row.args.get($i).copied().unwrap_or("?").to_owned(),
                        self.$i.audit(),
                    );
                )+
                Value::Object(args)
            }
        }
    };
}
audit_tuple!(1; A 0);
audit_tuple!(2; A 0, B 1);
audit_tuple!(3; A 0, B 1, C 2);
audit_tuple!(4; A 0, B 1, C 2, D 3);
audit_tuple!(5; A 0, B 1, C 2, D 3, E 4);
audit_tuple!(6; A 0, B 1, C 2, D 3, E 4, F 5);
audit_tuple!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_string_is_cut_on_a_character_boundary_and_says_its_length() {
        assert_eq!(arg_str("eth0"), Value::from("eth0"));
        let exact = "a".repeat(256);
        assert_eq!(arg_str(&exact), Value::from(exact.as_str()));
        // 255 ASCII bytes then a 3-byte character straddling byte 256.
        let long = format!("{}€tail", "a".repeat(255));
        assert_eq!(
            arg_str(&long),
            Value::from(format!("{}... ({} bytes)", "a".repeat(255), long.len()))
        );
    }

    #[test]
    fn a_tuple_reads_as_an_object_keyed_by_the_rows_parameters() {
        const ROW: Entry = Entry {
            call: "link.set-mtu",
            args: &["ns", "index", "mtu"],
            authority: "",
            policy: "",
            undo: "",
            mutates: true,
            in_gc: false,
            needs: &[],
        };
        assert_eq!(
            (Kind::Host, 7u32, Some(1500u32)).audit(&ROW),
            serde_json::json!({"ns": "host", "index": 7, "mtu": 1500})
        );
        assert_eq!(
            (Kind::Container, None::<u32>, Size(3)).audit(&ROW),
            serde_json::json!({"ns": "container", "index": null, "mtu": {"bytes": 3}})
        );
    }
}
