//! Slurm's `SLURM_TASKS_PER_NODE`: `2(x3),1` is 2 tasks on each of three nodes,
//! then 1 on the fourth.

use super::hostlist::MAX_HOSTS;
use super::slots::parse_count;
use super::topology_error::{ParseError, shorten};

/// `2(x3),1` → `[2, 2, 2, 1]`.
pub(crate) fn parse_tasks_per_node(list: &str) -> Result<Vec<u32>, ParseError> {
    let mut counts = Vec::new();
    for item in list.split(',') {
        let bad = || ParseError::BadTasks {
            item: shorten(item),
            list: shorten(list),
        };
        let (count, repeat) = match item.strip_suffix(')') {
            Some(head) => head.split_once("(x").ok_or_else(bad)?,
            None => (item, "1"),
        };
        let count = parse_count(count).map_err(|_| bad())?;
        let repeat = parse_count(repeat).map_err(|_| bad())?;
        let repeat = usize::try_from(repeat).map_err(|_| bad())?;
        if counts.len().saturating_add(repeat) > MAX_HOSTS {
            return Err(ParseError::TooManyTasks {
                list: shorten(list),
                limit: MAX_HOSTS,
            });
        }
        counts.extend(std::iter::repeat_n(count, repeat));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_repeats() {
        assert_eq!(parse_tasks_per_node("2(x3),1"), Ok(vec![2, 2, 2, 1]));
        assert_eq!(parse_tasks_per_node("4"), Ok(vec![4]));
        assert_eq!(parse_tasks_per_node("1,8(x2)"), Ok(vec![1, 8, 8]));
    }

    #[test]
    fn errors_name_the_item_and_the_list() {
        assert_eq!(
            parse_tasks_per_node("2(x0),1").map_err(|e| e.to_string()),
            Err("'2(x0)' in '2(x0),1' is not a task count such as 2 or 2(x3)".to_string())
        );
        for bad in [
            "", "0", "2(x)", "2x3", "2(3)", "(x3)", "2(x3", "-1", "2,,1", "2(x3))",
        ] {
            assert!(parse_tasks_per_node(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(
            parse_tasks_per_node("1(x4000000000)"),
            Err(ParseError::TooManyTasks { .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(list in "[0-9x(),]{0,30}|\\PC{0,30}") {
            let _ = parse_tasks_per_node(&list);
        }
    }
}
