//! Turning `host:port` into socket addresses without glibc's NSS, which a statically linked
//! binary in a `FROM scratch` image cannot load: IP literals and `localhost` are handled here,
//! other names through `/etc/hosts`, and only then through the system resolver.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Splits `host:port` (`[v6]:port` for IPv6) into host and port.
pub fn split_host_port(address: &str) -> Result<(&str, u16), String> {
    let (host, port) = if let Some(rest) = address.strip_prefix('[') {
        let (host, port) = rest
            .split_once("]:")
            .ok_or_else(|| format!("address {address:?} is not [host]:port"))?;
        (host, port)
    } else {
        address
            .rsplit_once(':')
            .ok_or_else(|| format!("address {address:?} has no port"))?
    };
    let port = port
        .parse()
        .map_err(|_| format!("address {address:?} has an invalid port"))?;
    Ok((host, port))
}

/// The addresses for `host:port`, in the order to try them.
pub async fn resolve(address: &str) -> Result<Vec<SocketAddr>, String> {
    let (host, port) = split_host_port(address)?;
    if let Some(ips) = resolve_without_nss(host) {
        return Ok(ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect());
    }
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .collect();
    if found.is_empty() {
        return Err(format!("cannot resolve {host:?}: no addresses"));
    }
    Ok(found)
}

fn resolve_without_nss(host: &str) -> Option<Vec<IpAddr>> {
    if host.is_empty() {
        return Some(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(vec![ip]);
    }
    if host.eq_ignore_ascii_case("localhost") || host.eq_ignore_ascii_case("localhost.") {
        return Some(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    }
    let hosts = std::fs::read_to_string("/etc/hosts").ok()?;
    let found = hosts_lookup(&hosts, host);
    (!found.is_empty()).then_some(found)
}

/// The addresses `/etc/hosts` (given as text) lists for `host`.
pub fn hosts_lookup(hosts: &str, host: &str) -> Vec<IpAddr> {
    hosts
        .lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or_default();
            let mut fields = line.split_whitespace();
            let ip: IpAddr = fields.next()?.parse().ok()?;
            fields
                .any(|name| name.eq_ignore_ascii_case(host))
                .then_some(ip)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port() {
        assert_eq!(
            split_host_port("localhost:9446").unwrap(),
            ("localhost", 9446)
        );
        assert_eq!(split_host_port("[::1]:80").unwrap(), ("::1", 80));
        assert_eq!(split_host_port(":80").unwrap(), ("", 80));
        assert!(split_host_port("localhost").is_err());
        assert!(split_host_port("h:x").is_err());
    }

    #[test]
    fn hosts_file() {
        let hosts = "127.0.0.1 localhost\n# 10.0.0.9 pod\n10.0.0.7 svc.ns svc # comment\n";
        assert_eq!(
            hosts_lookup(hosts, "svc"),
            vec!["10.0.0.7".parse::<IpAddr>().unwrap()]
        );
        assert!(hosts_lookup(hosts, "pod").is_empty());
    }
}
