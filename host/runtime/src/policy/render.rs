//! A namespace grant as one line (`read; modify; create [veth]; ...`,
//! or `nothing`), for messages and listings.

use std::fmt;

use super::grant::{NsGrant, Pattern};

impl fmt::Display for NsGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        let mut flag = |on: bool, name: &str| {
            if on {
                parts.push(name.to_owned());
            }
        };
        flag(self.read, "read");
        flag(self.modify, "modify");
        flag(self.move_links, "move");
        flag(self.addresses, "addresses");
        flag(self.routes, "routes");
        flag(self.announce, "announce");
        flag(self.traffic_control, "traffic-control");
        flag(self.config_vlans, "config-vlans");
        flag(self.adopt_peer, "adopt-peer");
        flag(self.firewall.port_mappings, "firewall.port-mappings");
        flag(self.firewall.masquerade, "firewall.masquerade");
        flag(self.firewall.forward, "firewall.forward");
        flag(self.firewall.isolation, "firewall.isolation");
        flag(self.firewall.mac_spoof, "firewall.mac-spoof");
        let list = |v: &[Pattern]| {
            v.iter()
                .map(|p| p.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.create.is_empty() {
            let kinds: Vec<&str> = self.create.iter().map(|k| k.name()).collect();
            parts.push(format!("create [{}]", kinds.join(", ")));
        }
        if !self.links.is_empty() {
            parts.push(format!("links [{}]", list(&self.links)));
        }
        if !self.masters.is_empty() {
            parts.push(format!("masters [{}]", list(&self.masters)));
        }
        if !self.bridges.is_empty() {
            parts.push(format!("bridges [{}]", list(&self.bridges)));
        }
        if !self.sysctls.is_empty() {
            parts.push(format!("sysctls [{}]", list(&self.sysctls)));
        }
        if !self.prefixes.is_empty() {
            let p: Vec<String> = self.prefixes.iter().map(|p| p.to_string()).collect();
            parts.push(format!("prefixes [{}]", p.join(", ")));
        }
        if let Some(names) = &self.names {
            parts.push(format!("names [{}]", list(names)));
        }
        if !self.config_links.is_empty() {
            let keys: Vec<&str> = self.config_links.iter().map(|k| k.name()).collect();
            parts.push(format!("config-links [{}]", keys.join(", ")));
        }
        if parts.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firewall_grants_parse_and_print() {
        let g: NsGrant =
            serde_json::from_str(r#"{"firewall": {"port-mappings": true, "forward-mark": 4096}}"#)
                .expect("grant");
        assert!(g.firewall.port_mappings && !g.firewall.masquerade);
        assert_eq!(g.firewall.forward_mark, Some(4096));
        assert!(g.to_string().contains("firewall.port-mappings"), "{g}");
        let empty: NsGrant = serde_json::from_str("{}").expect("grant");
        assert!(empty.firewall.is_empty());
        assert!(!serde_json::to_string(&empty)
            .expect("json")
            .contains("firewall"));
    }
}
