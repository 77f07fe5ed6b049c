//! Node devices named the way the reference `host-device` plugin names
//! them: by a sysfs device path (`kernelpath`) or a PCI address
//! (`pciBusID`, `runtimeConfig.deviceID`), resolved to the names of their
//! network interfaces through sysfs.
//!
//! # Ambient authority
//! Reads below `/sys` (the sysfs of wasmcni's own mount namespace, which
//! shows the network devices of the namespace that mounted it: the
//! node's). Only directory listings, only below `/sys/devices/` and
//! `/sys/bus/pci/devices/`; a path with `..`, `.` or a NUL is refused.

use std::io;
use std::path::{Path, PathBuf};

/// Where `kernelpath` values must lie.
pub const KERNEL_PATH_PREFIX: &str = "/sys/devices/";

/// Where PCI devices are listed.
const PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// The names of the network interfaces of the sysfs device `path`
/// (`<path>/net/`), sorted by name. `InvalidInput` if `path` is not a plain
/// absolute path below [`KERNEL_PATH_PREFIX`]; `NotFound` if it has no
/// `net/` directory.
pub fn of_kernel_path(path: &str) -> io::Result<Vec<String>> {
    let p = Path::new(path);
    // Path::components() folds `.` away: look at the text.
    let plain = path.starts_with(KERNEL_PATH_PREFIX)
        && !path.contains('\0')
        && !path.split('/').any(|seg| seg == "." || seg == "..");
    if !plain {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "kernel device path {path:?} must be absolute and begin with {KERNEL_PATH_PREFIX}"
            ),
        ));
    }
    list(&p.join("net"))
}

/// The names of the network interfaces of PCI device `address`
/// (`/sys/bus/pci/devices/<address>/net/`, or for a virtio-net device the
/// `virtio*/net/` below it), sorted by name. `InvalidInput` if `address`
/// is not one path component; `NotFound` if the device or its `net/`
/// directory does not exist.
pub fn of_pci_address(address: &str) -> io::Result<Vec<String>> {
    if address.is_empty() || address.contains(['/', '\0']) || address == "." || address == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid PCI address {address:?}"),
        ));
    }
    let dev = Path::new(PCI_DEVICES).join(address);
    std::fs::symlink_metadata(&dev)?;
    let net = dev.join("net");
    if std::fs::symlink_metadata(&net).is_ok() {
        return list(&net);
    }
    let mut virtio: Vec<PathBuf> = std::fs::read_dir(&dev)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("virtio"))
        .map(|e| e.path().join("net"))
        .filter(|p| p.is_dir())
        .collect();
    virtio.sort();
    match virtio.first() {
        Some(p) => list(p),
        None => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no net directory under pci device {address}"),
        )),
    }
}

/// The network interfaces of the namespace sysfs shows, in index order,
/// with their hardware addresses (`/sys/class/net/*/{ifindex,address}`).
fn interfaces_by_index() -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut out: Vec<(u32, String, Vec<u8>)> = Vec::new();
    for e in std::fs::read_dir("/sys/class/net")?.flatten() {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let read = |f: &str| std::fs::read_to_string(e.path().join(f)).unwrap_or_default();
        let Ok(index) = read("ifindex").trim().parse::<u32>() else {
            continue;
        };
        let mac = read("address")
            .trim()
            .split(':')
            .map(|b| u8::from_str_radix(b, 16))
            .collect::<Result<Vec<u8>, _>>()
            .unwrap_or_default();
        out.push((index, name, mac));
    }
    out.sort();
    Ok(out.into_iter().map(|(_, n, m)| (n, m)).collect())
}

/// The name of the first interface with hardware address `mac`, in index
/// order (as the reference `host-device` walks the link list).
pub fn by_mac(mac: &[u8]) -> io::Result<Option<String>> {
    Ok(interfaces_by_index()?
        .into_iter()
        .find(|(_, m)| m == mac)
        .map(|(n, _)| n))
}

/// The first of `names` (sorted) that is an interface of the namespace
/// sysfs shows.
pub fn first_present(names: &[String]) -> Option<String> {
    names
        .iter()
        .find(|n| Path::new("/sys/class/net").join(n).exists())
        .cloned()
}

fn list(dir: &Path) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_outside_sys_devices_are_refused() {
        for bad in [
            "/etc",
            "sys/devices/x",
            "/sys/devices/../../etc",
            "/sys/devices/./x",
            "/sys/class/net",
            "/sys/devices/x\0",
        ] {
            let e = of_kernel_path(bad).expect_err(bad);
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
        for bad in ["", ".", "..", "a/b", "../../../etc"] {
            let e = of_pci_address(bad).expect_err(bad);
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn a_missing_device_is_not_found() {
        let e = of_kernel_path("/sys/devices/wasmcni-no-such-device").expect_err("none");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let e = of_pci_address("0000:99:99.9").expect_err("none");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_virtual_device_lists_its_interfaces() {
        // `lo` is a network device of /sys/devices/virtual/net/lo; its
        // net/ directory does not exist, but /sys/devices/virtual/net does
        // and lists every virtual link of the namespace sysfs shows.
        let names = of_kernel_path("/sys/devices/virtual").expect("virtual");
        assert!(names.contains(&"lo".to_owned()), "{names:?}");
    }
}
