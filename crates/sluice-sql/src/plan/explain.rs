//! `EXPLAIN` text of the plan nodes whose description does not fit in the
//! plan's own formatting (kept here so `plan.rs` stays one read).

use std::fmt;

use datafusion::logical_expr::{Expr, SortExpr};

use super::OverFrame;

/// A frame as SQL writes it.
pub(super) fn frame_sql(frame: &OverFrame) -> String {
    let (units, preceding) = match frame {
        OverFrame::Rows { preceding } => ("ROWS", preceding.map(|n| n.to_string())),
        OverFrame::Range { preceding } => ("RANGE", preceding.map(|d| d.to_string())),
    };
    match preceding {
        Some(n) => format!("{units} BETWEEN {n} PRECEDING AND CURRENT ROW"),
        None => format!("{units} BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"),
    }
}

/// `ChangelogOver`: what it recomputes when a row changes, and that its
/// state grows with the input's distinct keys (every live row is kept).
pub(super) fn changelog_over(
    f: &mut fmt::Formatter<'_>,
    pad: &str,
    partition_by: &[Expr],
    order_by: &[SortExpr],
    frame: &OverFrame,
    aggregates: &[Expr],
) -> fmt::Result {
    let list = |es: &mut dyn Iterator<Item = String>| es.collect::<Vec<_>>().join(", ");
    let after = match frame {
        OverFrame::Rows { preceding: Some(n) } => format!("the {n} rows after it"),
        OverFrame::Range { preceding: Some(d) } => {
            format!("its peers and the rows up to {d} after it")
        }
        OverFrame::Rows { preceding: None } | OverFrame::Range { preceding: None } => {
            "every row after it".to_string()
        }
    };
    writeln!(
        f,
        "{pad}ChangelogOver: partition_by=[{}], order_by=[{}] then the whole row, frame={}, aggregates=[{}], emit=changes (per cycle, a changed row and {after} retract their old outputs and insert new ones)",
        list(&mut partition_by.iter().map(|e| e.to_string())),
        list(&mut order_by.iter().map(|s| s.to_string())),
        frame_sql(frame),
        list(&mut aggregates.iter().map(|e| e.to_string())),
    )?;
    writeln!(
        f,
        "{pad}  state: every live input row with its last output, per partition key; grows with the input's distinct keys (never freed)"
    )
}
