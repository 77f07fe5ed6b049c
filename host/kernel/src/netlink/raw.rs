//! Netlink messages the typed crates do not cover (ctnetlink, rtnetlink's
//! netconf, a nest the crate would fill in itself), built and read by hand.

/// A request: `nlmsghdr` (type `ty`), a 4-byte family header (`struct
/// nfgenmsg` or `struct netconfmsg`: the family, then zeros), then `attrs`.
pub(super) fn message(ty: u16, flags: u16, seq: u32, family: u8, attrs: &[u8]) -> Vec<u8> {
    let len = 16 + 4 + attrs.len();
    let mut v = Vec::with_capacity(len);
    v.extend((len as u32).to_ne_bytes());
    v.extend(ty.to_ne_bytes());
    v.extend(flags.to_ne_bytes());
    v.extend(seq.to_ne_bytes());
    v.extend(0u32.to_ne_bytes());
    v.extend([family, 0, 0, 0]);
    v.extend(attrs);
    v
}

/// One attribute, `kind` (with any flags) around `payload`; payloads here
/// are whole 4-byte words, so it needs no padding.
pub(super) fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + payload.len());
    v.extend((4 + payload.len() as u16).to_ne_bytes());
    v.extend(kind.to_ne_bytes());
    v.extend(payload);
    v
}

/// The attributes of a stream: (type without flags, payload, whole bytes).
/// A malformed one ends the stream.
pub(super) fn attributes(b: &[u8]) -> Vec<(u16, &[u8], &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= b.len() {
        let l = u16::from_ne_bytes([b[i], b[i + 1]]) as usize;
        let t = u16::from_ne_bytes([b[i + 2], b[i + 3]]) & 0x3fff;
        if l < 4 || i + l > b.len() {
            break;
        }
        out.push((t, &b[i + 4..i + l], &b[i..i + l]));
        i += (l + 3) & !3;
    }
    out
}
