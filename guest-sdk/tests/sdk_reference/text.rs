//! Doc comments made into the reference's Markdown, as rustdoc would show
//! them: code blocks are Rust unless they say otherwise, and lose the lines
//! rustdoc hides (`# fn f() {`); headings move under the item's heading;
//! intra-doc links (``[`Netns::container`]``, `[text](crate::cni::Cidr)`)
//! point at the item's heading in the reference.

/// Resolves an intra-doc link target to an anchor (`None`: no link).
pub type Link<'a> = dyn FnMut(&str) -> Option<String> + 'a;

/// The code block attributes rustdoc knows: a block with only these is Rust.
const RUST_ATTRS: &[&str] = &[
    "rust",
    "no_run",
    "ignore",
    "should_panic",
    "compile_fail",
    "test_harness",
    "standalone_crate",
];

fn fence(line: &str) -> Option<&str> {
    let t = line.trim_start();
    t.strip_prefix("```").or_else(|| t.strip_prefix("~~~"))
}

/// Whether a code block's info string makes it Rust.
fn is_rust(info: &str) -> bool {
    info.split([',', ' ', '\t'])
        .filter(|a| !a.is_empty())
        .all(|a| RUST_ATTRS.contains(&a) || a.starts_with("edition"))
}

/// A doc comment as a Markdown block whose headings start at `level`.
pub fn block(doc: &str, level: usize, link: &mut Link) -> String {
    let (doc, defs) = definitions(doc);
    let lines: Vec<&str> = doc.lines().collect();
    let mut in_code = false;
    let min = lines
        .iter()
        .scan(false, |code, l| {
            if fence(l).is_some() {
                *code = !*code;
                return Some(None);
            }
            Some((!*code).then(|| heading_level(l)).flatten())
        })
        .flatten()
        .min()
        .unwrap_or(level);
    let mut out: Vec<String> = Vec::new();
    let mut prose: Vec<String> = Vec::new();
    let mut rust = false;
    let flush = |prose: &mut Vec<String>, out: &mut Vec<String>, link: &mut Link| {
        if !prose.is_empty() {
            out.push(links(&prose.join("\n"), &defs, link));
            prose.clear();
        }
    };
    for line in lines {
        if let Some(info) = fence(line) {
            if in_code {
                out.push("```".into());
                in_code = false;
            } else {
                flush(&mut prose, &mut out, link);
                rust = is_rust(info.trim());
                let lang = if rust {
                    "rust"
                } else {
                    info.split([',', ' ']).next().unwrap_or("")
                };
                out.push(format!("```{lang}"));
                in_code = true;
            }
            continue;
        }
        if in_code {
            if rust {
                let t = line.trim_start();
                if t == "#" || t.starts_with("# ") {
                    continue;
                }
                if let Some(rest) = t.strip_prefix("##") {
                    let indent = &line[..line.len() - t.len()];
                    out.push(format!("{indent}#{rest}"));
                    continue;
                }
            }
            out.push(line.to_owned());
            continue;
        }
        match heading_level(line) {
            Some(n) => {
                let text = line.trim_start_matches('#').trim();
                let to = (n - min + level).min(6);
                prose.push(format!("{} {text}", "#".repeat(to)));
            }
            None => prose.push(line.to_owned()),
        }
    }
    flush(&mut prose, &mut out, link);
    tidy(&out.join("\n"))
}

/// One blank line around each heading and code block, and never two in a
/// row, outside code blocks.
fn tidy(md: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let mut in_code = false;
    let mut blank_after = false;
    for line in md.lines() {
        let opens = fence(line).is_some() && !in_code;
        let closes = fence(line).is_some() && in_code;
        if in_code && !closes {
            out.push(line);
            continue;
        }
        let block_start = opens || heading_level(line).is_some();
        if line.trim().is_empty() {
            if out.last().is_some_and(|l| !l.is_empty()) {
                out.push("");
            }
            blank_after = false;
            continue;
        }
        if (block_start || blank_after) && out.last().is_some_and(|l| !l.is_empty()) {
            out.push("");
        }
        out.push(line);
        in_code = opens || (in_code && !closes);
        blank_after = closes || heading_level(line).is_some() && !opens;
    }
    out.join("\n").trim().to_owned()
}

/// Link reference definitions (`[label]: target`, outside code blocks):
/// the doc without them, and (label, target) pairs.
fn definitions(doc: &str) -> (String, Vec<(String, String)>) {
    let mut in_code = false;
    let mut kept = Vec::new();
    let mut defs = Vec::new();
    for line in doc.lines() {
        if fence(line).is_some() {
            in_code = !in_code;
        }
        if !in_code {
            if let Some((label, dest)) = line
                .strip_prefix('[')
                .and_then(|l| l.split_once("]: "))
                .filter(|(label, dest)| !label.is_empty() && !dest.trim().contains(' '))
            {
                defs.push((label.to_owned(), dest.trim().to_owned()));
                continue;
            }
        }
        kept.push(line);
    }
    (kept.join("\n").trim_end().to_owned(), defs)
}

fn heading_level(line: &str) -> Option<usize> {
    let n = line.chars().take_while(|&c| c == '#').count();
    (n > 0 && line[n..].starts_with(' ')).then_some(n)
}

/// The first paragraph of a doc comment, on one line.
pub fn summary(doc: &str, link: &mut Link) -> String {
    let (doc, defs) = definitions(doc);
    if let Some(n) = doc.lines().next().and_then(heading_level) {
        return links(doc.lines().next().unwrap_or("")[n..].trim(), &defs, link);
    }
    let para: Vec<&str> = doc
        .lines()
        .take_while(|l| !l.trim().is_empty() && fence(l).is_none())
        .map(str::trim)
        .collect();
    links(&para.join(" "), &defs, link)
}

/// A whole (short) doc comment on one line, for a table cell: paragraphs
/// joined, code blocks left out, `|` escaped.
pub fn cell(doc: &str, link: &mut Link) -> String {
    let (doc, defs) = definitions(doc);
    let mut in_code = false;
    let mut words = Vec::new();
    for l in doc.lines() {
        if fence(l).is_some() {
            in_code = !in_code;
            continue;
        }
        if !in_code && !l.trim().is_empty() {
            words.push(l.trim());
        }
    }
    links(&words.join(" "), &defs, link).replace('|', "\\|")
}

/// Whether `s` reads as a Rust path an intra-doc link may name.
fn is_path(s: &str) -> bool {
    let s = s.split_once('@').map_or(s, |(_, p)| p);
    let s = s.trim_end_matches("()").trim_end_matches('!');
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && s.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == ':')
}

/// Whether a link destination is a URL or a file rather than an item.
fn is_url(dest: &str) -> bool {
    dest.contains("://")
        || dest.starts_with('#')
        || dest.starts_with('/')
        || dest.starts_with('.')
        || dest.contains(".md")
        || dest.contains(".html")
}

/// The index of the `close` that ends what opens at `open`, skipping code
/// spans and nested pairs.
fn matching(chars: &[char], open: usize, (o, c): (char, char)) -> Option<usize> {
    let mut depth = 0;
    let mut i = open;
    while i < chars.len() {
        match chars[i] {
            '`' => i = code_span_end(chars, i).unwrap_or(i + 1) - 1,
            x if x == o => depth += 1,
            x if x == c => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index just past the code span that starts at `i`, if it closes.
fn code_span_end(chars: &[char], i: usize) -> Option<usize> {
    let run = chars[i..].iter().take_while(|&&c| c == '`').count();
    let mut j = i + run;
    while j < chars.len() {
        if chars[j] == '`' {
            let close = chars[j..].iter().take_while(|&&c| c == '`').count();
            if close == run {
                return Some(j + close);
            }
            j += close;
        } else {
            j += 1;
        }
    }
    None
}

/// A link to `dest` with text `inner`: kept when `dest` is a URL or a
/// file, pointed at the item's anchor, or (nothing documents it) left as
/// its text.
fn target(inner: &str, dest: &str, link: &mut Link) -> String {
    if is_url(dest) {
        return format!("[{inner}]({dest})");
    }
    match link(dest) {
        Some(anchor) => format!("[{inner}](#{anchor})"),
        None => inner.to_owned(),
    }
}

/// Rewrites the intra-doc links of a Markdown text (no code blocks);
/// `defs` are its link reference definitions.
pub fn links(text: &str, defs: &[(String, String)], link: &mut Link) -> String {
    let def = |label: &str| {
        defs.iter()
            .find(|(l, _)| l == label)
            .map(|(_, d)| d.clone())
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '`' => {
                let end = code_span_end(&chars, i)
                    .unwrap_or(i + chars[i..].iter().take_while(|&&c| c == '`').count());
                out.extend(&chars[i..end]);
                i = end;
                continue;
            }
            '[' => {
                if let Some(close) = matching(&chars, i, ('[', ']')) {
                    let inner: String = chars[i + 1..close].iter().collect();
                    match chars.get(close + 1) {
                        Some('(') => {
                            if let Some(end) = matching(&chars, close + 1, ('(', ')')) {
                                let dest: String = chars[close + 2..end].iter().collect();
                                out.push_str(&target(&inner, &dest, link));
                                i = end + 1;
                                continue;
                            }
                        }
                        Some('[') => {
                            if let Some(end) = matching(&chars, close + 1, ('[', ']')) {
                                let label: String = chars[close + 2..end].iter().collect();
                                let label = if label.is_empty() {
                                    inner.clone()
                                } else {
                                    label
                                };
                                if let Some(dest) = def(&label) {
                                    out.push_str(&target(&inner, &dest, link));
                                    i = end + 1;
                                    continue;
                                }
                            }
                        }
                        _ => {
                            if let Some(dest) = def(&inner) {
                                out.push_str(&target(&inner, &dest, link));
                                i = close + 1;
                                continue;
                            }
                            let path = inner.trim_matches('`');
                            if is_path(path) {
                                out.push_str(&target(&inner, path, link));
                                i = close + 1;
                                continue;
                            }
                        }
                    }
                }
                out.push('[');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// A heading's anchor as GitHub makes it: the text without its Markdown,
/// lower case, punctuation dropped, spaces as `-`.
pub fn slug(heading: &str) -> String {
    let chars: Vec<char> = heading.chars().collect();
    let mut plain = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == ']' && chars.get(i + 1) == Some(&'(') {
            if let Some(end) = matching(&chars, i + 1, ('(', ')')) {
                i = end + 1;
                continue;
            }
        }
        plain.push(chars[i]);
        i += 1;
    }
    plain
        .trim()
        .to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The headings of a Markdown text outside its code blocks: (level, text).
pub fn headings(md: &str) -> Vec<(usize, String)> {
    let mut in_code = false;
    let mut out = Vec::new();
    for l in md.lines() {
        if fence(l).is_some() {
            in_code = !in_code;
        } else if !in_code {
            if let Some(n) = heading_level(l) {
                out.push((n, l[n..].trim().to_owned()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(dest: &str) -> Option<String> {
        (dest != "Missing").then(|| format!("to-{}", dest.replace("::", "-")))
    }

    #[test]
    fn intra_doc_links_point_at_anchors() {
        let mut link = resolve;
        assert_eq!(
            links(
                "see [`Netns::host`] and [the docs](crate::net)",
                &[],
                &mut link
            ),
            "see [`Netns::host`](#to-Netns-host) and [the docs](#to-crate-net)"
        );
        assert_eq!(
            links(
                "[`Missing`], `[a](b)`, [x](https://e.x), [...] and a[0]",
                &[],
                &mut link
            ),
            "`Missing`, `[a](b)`, [x](https://e.x), [...] and a[0]"
        );
        assert_eq!(
            links("its [attachment\nrecord](crate::state)", &[], &mut link),
            "its [attachment\nrecord](#to-crate-state)"
        );
        assert_eq!(
            block("[`X`] and [y][`X`]\n\n[`X`]: crate::cni::X", 3, &mut link),
            "[`X`](#to-crate-cni-X) and [y](#to-crate-cni-X)"
        );
    }

    #[test]
    fn code_blocks_are_rust_and_hide_what_rustdoc_hides() {
        let doc = "# Example\n```no_run\n# fn f() {\nlet x = 1;\n## not hidden\n# }\n```\n```sh\n# a comment\n```";
        let mut link = resolve;
        assert_eq!(
            block(doc, 3, &mut link),
            "### Example\n\n```rust\nlet x = 1;\n# not hidden\n```\n\n```sh\n# a comment\n```"
        );
    }

    #[test]
    fn slugs_are_githubs() {
        assert_eq!(slug("struct `net::RouteInfo`"), "struct-netrouteinfo");
        assert_eq!(
            slug("Example: links (netns, veth)"),
            "example-links-netns-veth"
        );
        assert_eq!(slug("Module `cni` – 0.1.0"), "module-cni--010");
    }
}
