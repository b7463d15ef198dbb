//! Rendering the contract's variables for `sh` and as JSON.

/// `export NAME='value'` lines, safe to `eval` in any POSIX shell whatever the
/// values hold: every value is single-quoted, and a `'` inside is written `'\''`.
pub fn render_sh(vars: &[(String, String)]) -> String {
    let mut out = String::new();
    for (name, value) in vars {
        out.push_str("export ");
        out.push_str(name);
        out.push('=');
        out.push_str(&crate::sh::quote_str(value));
        out.push('\n');
    }
    out
}

/// One JSON object, its keys in the contract's order, every value a string.
pub fn render_json(vars: &[(String, String)]) -> String {
    let string = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let fields: Vec<String> = vars
        .iter()
        .map(|(name, value)| format!("  {}: {}", string(name), string(value)))
        .collect();
    if fields.is_empty() {
        return "{}\n".to_string();
    }
    format!("{{\n{}\n}}\n", fields.join(",\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn sh_single_quotes_everything() {
        assert_eq!(
            render_sh(&vars(&[
                ("A", "plain"),
                ("B", "it's $HOME `x` \\n\nline2"),
                ("C", "")
            ])),
            "export A='plain'\nexport B='it'\\''s $HOME `x` \\n\nline2'\nexport C=''\n"
        );
        assert_eq!(crate::sh::quote_str("''"), r"''\'''\'''");
    }

    #[test]
    fn json_keeps_the_order_and_escapes() {
        let text = render_json(&vars(&[("Z", "1"), ("A", "quote\" back\\ nl\n")]));
        assert_eq!(
            text,
            "{\n  \"Z\": \"1\",\n  \"A\": \"quote\\\" back\\\\ nl\\n\"\n}\n"
        );
        let parsed: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(parsed["A"], "quote\" back\\ nl\n");
        assert_eq!(render_json(&[]), "{}\n");
    }
}
