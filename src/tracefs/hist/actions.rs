//! The actions of a hist trigger: `onmatch()`, `onmax()` and
//! `onchange()` with `trace()` (or `synthetic_event()`), `save()` and
//! `snapshot()`, parsed and checked against the synthetic event's fields
//! as `parse_action()`, `onmatch_create()` and `trace_action_create()` in
//! `kernel/trace/trace_events_hist.c` do.

use super::{
    ActKind, Action, Errs, HField, Handler, HistEnv, E_ACTION_MISMATCH, E_ACTION_NOT_FOUND,
    E_HIST_NOT_FOUND, E_INVALID_PARAM, E_INVALID_SUBSYS_EVENT, E_NO_CLOSING_PAREN,
    E_PARAM_NOT_FOUND, E_SUBSYS_NOT_FOUND, E_SYNTH_COUNT_MISMATCH, E_SYNTH_TYPE_MISMATCH,
    E_TOO_MANY_PARAMS,
};
use crate::base::errno::Errno;
use crate::tracefs::parse::is_space_char as is_space;
use crate::tracefs::synth::SynthDef;

use super::expr::{FoundVar, Parser};

/// `parse_action_params()`: comma-separated, blanks stripped, each at
/// least two characters; with `keyword` the first is the synthetic event.
fn action_params(
    errs: &mut Errs<'_>,
    params: &str,
    keyword: bool,
    synth: &mut String,
) -> Result<Vec<String>, Errno> {
    let mut out = Vec::new();
    let mut first = true;
    for p in params.split(',') {
        if out.len() >= crate::tracefs::synth::FIELDS_MAX {
            errs.at0(E_TOO_MANY_PARAMS);
            return Err(Errno::EINVAL);
        }
        let p = p.trim_matches(is_space);
        if p.len() < 2 {
            errs.at(E_INVALID_PARAM, p);
            return Err(Errno::EINVAL);
        }
        if first && keyword {
            *synth = p.to_string();
            first = false;
            continue;
        }
        first = false;
        out.push(p.to_string());
    }
    Ok(out)
}

/// `action_parse()`: `.name(params)` after a handler.
fn parse_action(errs: &mut Errs<'_>, s: &str, handler: Handler) -> Result<Action, Errno> {
    let Some((_, after)) = s.split_once('.') else {
        errs.at0(E_ACTION_NOT_FOUND);
        return Err(Errno::EINVAL);
    };
    let Some((name, rest)) = after.split_once('(') else {
        errs.at0(E_ACTION_NOT_FOUND);
        return Err(Errno::EINVAL);
    };
    let onmatch = matches!(handler, Handler::Match { .. });
    let params_text = rest.split(')').next().unwrap_or("");
    let mut synth = String::new();
    let (kind, params) = if name.starts_with("save") {
        let p = action_params(errs, params_text, false, &mut synth)?;
        if onmatch {
            errs.at(E_ACTION_MISMATCH, name);
            return Err(Errno::EINVAL);
        }
        (ActKind::Save, p)
    } else if name.starts_with("snapshot") {
        if !rest.contains(')') {
            errs.at(E_NO_CLOSING_PAREN, rest);
            return Err(Errno::EINVAL);
        }
        if onmatch {
            errs.at(E_ACTION_MISMATCH, name);
            return Err(Errno::EINVAL);
        }
        (ActKind::Snapshot, Vec::new())
    } else {
        let keyword = name.starts_with("trace");
        let p = action_params(errs, params_text, keyword, &mut synth)?;
        if !keyword {
            synth = name.to_string();
        }
        (ActKind::Trace { synth, keyword }, p)
    };
    Ok(Action {
        handler,
        kind,
        name: name.to_string(),
        params,
        param_refs: Vec::new(),
        track_ref: 0,
        track_slot: 0,
    })
}

/// `parse_actions()`: the handlers and actions, before any field.
pub(super) fn parse_actions(
    errs: &mut Errs<'_>,
    actions: &[String],
    env: &dyn HistEnv,
) -> Result<Vec<Action>, Errno> {
    let mut out = Vec::new();
    for act in actions {
        if let Some(rest) = act.strip_prefix("onmatch(") {
            let Some(close) = rest.find(')') else {
                errs.at(E_NO_CLOSING_PAREN, rest);
                return Err(Errno::EINVAL);
            };
            let target = &rest[..close];
            let Some((sys, ev)) = target.split_once('.') else {
                errs.at(E_SUBSYS_NOT_FOUND, target);
                return Err(Errno::EINVAL);
            };
            if !env.event_exists(sys, ev) {
                errs.at(E_INVALID_SUBSYS_EVENT, ev);
                return Err(Errno::EINVAL);
            }
            let h = Handler::Match {
                system: sys.to_string(),
                event: ev.to_string(),
            };
            out.push(parse_action(errs, &rest[close + 1..], h)?);
        } else {
            let (rest, max) = match act.strip_prefix("onmax(") {
                Some(r) => (r, true),
                None => (act.strip_prefix("onchange(").unwrap_or(""), false),
            };
            let Some(close) = rest.find(')') else {
                return Err(Errno::EINVAL);
            };
            let var_str = rest[..close].to_string();
            let h = if max {
                Handler::Max { var_str }
            } else {
                Handler::Change { var_str }
            };
            out.push(parse_action(errs, &rest[close + 1..], h)?);
        }
    }
    Ok(out)
}

/// `check_synth_field()`: whether a variable of type `v` fits field `f`.
fn synth_field_ok(f: &crate::tracefs::synth::SynthField, v: &HField) -> bool {
    if v.type_name.contains("char[") && f.is_string && f.is_dynamic {
        return true;
    }
    if f.is_stack {
        return false;
    }
    f.ty == v.type_name || (f.size == v.size && (f.is_string || f.signed == v.signed))
}

/// `trace_action_create()`: a reference for each parameter, checked
/// against the synthetic event's fields.
pub(super) fn trace_params(
    p: &mut Parser<'_, '_>,
    act: &Action,
    se: &SynthDef,
    onmatch: Option<&(String, String)>,
    field_vars: &mut Vec<HField>,
) -> Result<Vec<usize>, Errno> {
    let mut out = Vec::new();
    for prm in &act.params {
        let parts: Vec<&str> = prm.splitn(3, '.').collect();
        let (sys, ev, name) = match parts.as_slice() {
            [n] => (None, None, *n),
            [s, e, n] => (Some(*s), Some(*e), *n),
            _ => return Err(Errno::EINVAL),
        };
        let this = |s: Option<&str>, e: Option<&str>| {
            s.is_none() || (s == Some(p.def.system.as_str()) && e == Some(p.def.name.as_str()))
        };
        let found = if let Some(var) = name.strip_prefix('$') {
            let own = this(sys, ev)
                .then(|| {
                    p.vars
                        .iter()
                        .find(|v| v.var_name.as_deref() == Some(var))
                        .cloned()
                })
                .flatten();
            let f = match own {
                Some(v) => Some(FoundVar {
                    hist: None,
                    field: v,
                }),
                None => {
                    let (s, e) = match (sys, onmatch) {
                        (None, Some((s, e))) => (Some(s.as_str()), Some(e.as_str())),
                        _ => (sys, ev),
                    };
                    p.find_event_var(s, e, var)
                }
            };
            if f.is_none() {
                p.errs.at(E_PARAM_NOT_FOUND, var);
            }
            f
        } else if this(sys, ev) {
            match p.field_var(name) {
                Ok(f) => {
                    field_vars.push(f.clone());
                    Some(FoundVar {
                        hist: None,
                        field: f,
                    })
                }
                Err(_) => {
                    // A field of the matched event needs a histogram made
                    // there for it, which this replica does not do.
                    p.errs.at(E_HIST_NOT_FOUND, name);
                    None
                }
            }
        } else {
            p.errs.at(E_HIST_NOT_FOUND, name);
            None
        };
        let Some(v) = found else {
            return Err(Errno::EINVAL);
        };
        let Some(sf) = se.fields.get(out.len()) else {
            p.errs.at(E_SYNTH_TYPE_MISMATCH, name);
            return Err(Errno::EINVAL);
        };
        if !synth_field_ok(sf, &v.field) {
            p.errs.at(E_SYNTH_TYPE_MISMATCH, name);
            return Err(Errno::EINVAL);
        }
        out.push(p.var_ref(&v, sys, ev).ref_idx);
    }
    if out.len() != se.fields.len() {
        p.errs.at(E_SYNTH_COUNT_MISMATCH, &se.name);
        return Err(Errno::EINVAL);
    }
    Ok(out)
}
