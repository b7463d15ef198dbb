//! `multinode hosts`: the expanded topology, one node a line.

use super::inputs::Inputs;
use super::machine::System;
use super::placement::{HostRow, host_rows};
use crate::env_map::EnvMap;
use crate::error::Error;

/// Prints the topology as a table (`RANK HOST SLOTS ADDRESS`) or a JSON array
/// of `{rank, host, slots, address}`; `--no-resolve` leaves addresses out.
pub fn cmd_hosts(inputs: &Inputs, resolve: bool, json: bool) -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let rows = host_rows(inputs, &env, &System, resolve)?;
    let text = if json {
        render_json(&rows)
    } else {
        render_table(&rows)
    };
    crate::stdio::print_stdout(&text)
}

fn render_table(rows: &[HostRow]) -> String {
    let mut lines: Vec<[String; 4]> = vec![["RANK", "HOST", "SLOTS", "ADDRESS"].map(String::from)];
    lines.extend(rows.iter().map(|r| {
        [
            r.rank.to_string(),
            r.host.clone(),
            r.slots.to_string(),
            r.address.map_or_else(|| "-".to_string(), |a| a.to_string()),
        ]
    }));
    crate::table::render(&lines)
}

fn render_json(rows: &[HostRow]) -> String {
    let mut text = serde_json::to_string_pretty(rows).unwrap_or_else(|_| "[]".to_string());
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<HostRow> {
        vec![
            HostRow {
                rank: 0,
                host: "gpu01".into(),
                slots: 4,
                address: Some("10.0.0.1".parse().expect("address")),
            },
            HostRow {
                rank: 1,
                host: "gpu-long-name02".into(),
                slots: 12,
                address: None,
            },
        ]
    }

    #[test]
    fn table_is_aligned() {
        assert_eq!(
            render_table(&rows()),
            "\
RANK  HOST             SLOTS  ADDRESS
0     gpu01            4      10.0.0.1
1     gpu-long-name02  12     -
"
        );
    }

    #[test]
    fn json_is_an_array_of_objects() {
        let value: serde_json::Value =
            serde_json::from_str(&render_json(&rows())).expect("valid JSON");
        assert_eq!(
            value,
            serde_json::json!([
                {"rank": 0, "host": "gpu01", "slots": 4, "address": "10.0.0.1"},
                {"rank": 1, "host": "gpu-long-name02", "slots": 12, "address": null},
            ])
        );
    }
}
