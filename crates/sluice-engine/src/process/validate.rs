//! All-or-nothing validation of one handler call.

use std::collections::{BTreeMap, BTreeSet};

use super::types::{
    ProcessActivation, ProcessActivationResult, ProcessFunctionDescriptor, TimerOperation,
};

pub use crate::error::ProcessError;

use super::key::display_key as hex;

/// Check a complete response before any of it is applied. `timers` gives
/// each key's timers as they stand before the results apply (a timer that
/// fired in this call is already removed).
pub fn validate_call<'t>(
    d: &ProcessFunctionDescriptor,
    activations: &[ProcessActivation],
    results: &[ProcessActivationResult],
    timers: impl Fn(&[u8]) -> Option<&'t BTreeMap<String, i64>>,
) -> Result<(), ProcessError> {
    let err = |key: &str, reason: String| ProcessError {
        function: d.name.clone(),
        version: d.version,
        key: key.to_string(),
        reason,
    };
    let l = &d.limits;
    if activations.len() > l.max_activations_per_call {
        return Err(err(
            "-",
            format!(
                "{} activations exceed max_activations_per_call = {}",
                activations.len(),
                l.max_activations_per_call
            ),
        ));
    }
    if results.len() != activations.len() {
        return Err(err(
            "-",
            format!(
                "{} results for {} activations (one result per activation is required)",
                results.len(),
                activations.len()
            ),
        ));
    }
    let mut total_rows = 0usize;
    for (a, r) in activations.iter().zip(results) {
        // Hex only on the error path: this loop runs for every activation.
        let key = || hex(&a.key);
        if r.activation_id != a.id {
            return Err(err(
                &key(),
                format!(
                    "result for activation {} where activation {} was expected",
                    r.activation_id, a.id
                ),
            ));
        }
        if let Some(out) = &r.output {
            let got = out.schema();
            let same = got.fields().len() == d.output_schema.fields().len()
                && got
                    .fields()
                    .iter()
                    .zip(d.output_schema.fields())
                    .all(|(g, w)| g.name() == w.name() && g.data_type() == w.data_type());
            if !same {
                return Err(err(
                    &key(),
                    format!(
                        "output schema {:?} does not match the declared {:?}",
                        got.fields()
                            .iter()
                            .map(|f| (f.name(), f.data_type()))
                            .collect::<Vec<_>>(),
                        d.output_schema
                            .fields()
                            .iter()
                            .map(|f| (f.name(), f.data_type()))
                            .collect::<Vec<_>>()
                    ),
                ));
            }
            if let Some(f) = d
                .output_schema
                .fields()
                .iter()
                .zip(out.columns())
                .find(|(f, c)| !f.is_nullable() && c.null_count() > 0)
                .map(|(f, _)| f)
            {
                return Err(err(
                    &key(),
                    format!(
                        "output column '{}' is declared NOT NULL but holds nulls",
                        f.name()
                    ),
                ));
            }
            if out.num_rows() > l.max_output_rows_per_activation {
                return Err(err(
                    &key(),
                    format!(
                        "{} output rows exceed max_output_rows_per_activation = {}",
                        out.num_rows(),
                        l.max_output_rows_per_activation
                    ),
                ));
            }
            total_rows += out.num_rows();
        }
        if r.mutations.len() > l.max_state_changes_per_activation {
            return Err(err(
                &key(),
                format!(
                    "{} state changes exceed max_state_changes_per_activation = {}",
                    r.mutations.len(),
                    l.max_state_changes_per_activation
                ),
            ));
        }
        if r.timers.is_empty() {
            continue;
        }
        let mut names: BTreeSet<&str> = timers(&a.key)
            .map(|t| t.keys().map(String::as_str).collect())
            .unwrap_or_default();
        for t in &r.timers {
            match t {
                TimerOperation::Set { name, .. } => {
                    if name.len() > l.max_timer_name_len {
                        return Err(err(
                            &key(),
                            format!(
                                "timer name of {} bytes exceeds max_timer_name_len = {}",
                                name.len(),
                                l.max_timer_name_len
                            ),
                        ));
                    }
                    names.insert(name);
                }
                TimerOperation::Delete { name } => {
                    names.remove(name.as_str());
                }
            }
        }
        if names.len() > l.max_timers_per_key {
            return Err(err(
                &key(),
                format!(
                    "{} timers exceed max_timers_per_key = {}",
                    names.len(),
                    l.max_timers_per_key
                ),
            ));
        }
    }
    if total_rows > l.max_output_rows_per_call {
        return Err(err(
            "-",
            format!(
                "{total_rows} output rows exceed max_output_rows_per_call = {}",
                l.max_output_rows_per_call
            ),
        ));
    }
    Ok(())
}
