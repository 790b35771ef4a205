//! Parsing a `hist:` command: its attributes (`keys=`, `vals=`, `sort=`,
//! `size=`, `name=`, `clock=`, flags), variable assignments and sort keys,
//! in the order and with the errors of `kernel/trace/trace_events_hist.c`
//! (`parse_hist_trigger_attrs()`, `hist_trigger_elt_data_alloc()`,
//! `create_hist_fields()`, `create_sort_keys()`).

use super::{
    log2_roundup, ActKind, Errs, HField, Handler, HistDef, HistEnv, SortKey, ACTIONS_MAX,
    E_BAD_FIELD_MODIFIER, E_DUPLICATE_VAR, E_EMPTY_ASSIGNMENT, E_EMPTY_SORT_FIELD,
    E_FIELD_NOT_FOUND, E_FIELD_VAR_CREATE_FAIL, E_INVALID_REF_KEY, E_INVALID_SORT_FIELD,
    E_INVALID_SORT_MODIFIER, E_MALFORMED_ASSIGNMENT, E_NEED_NOHC_VAL, E_ONX_NOT_VAR,
    E_ONX_VAR_NOT_FOUND, E_SYNTH_EVENT_NOT_FOUND, E_TOO_MANY_SAVE_ACTIONS, E_TOO_MANY_SORT_FIELDS,
    E_TOO_MANY_VARS, FL_ALIAS, FL_BUCKET, FL_EXECNAME, FL_GRAPH, FL_HITCOUNT, FL_KEY, FL_LOG2,
    FL_PERCENT, FL_STRING, FL_SYM, FL_SYM_OFFSET, FL_VAR, FL_VAR_REF, KEYS_MAX, KEY_SIZE_MAX,
    MAP_BITS_DEFAULT, MAP_BITS_MAX, MAP_BITS_MIN, MAX_FILTER_STR_VAL, SORT_KEYS_MAX, VALS_MAX,
    VARS_MAX,
};
use crate::base::errno::Errno;
use crate::tracefs::events::EventDef;
use crate::tracefs::parse::is_space_char as is_space;
use crate::tracefs::parse::kstrtoul_base0;

use super::actions::{parse_actions, trace_params};
use super::expr::{FoundVar, Parser};

/// Attributes before the fields are built.
#[derive(Default)]
struct Attrs {
    keys: Option<String>,
    vals: Option<String>,
    sort: Option<String>,
    name: Option<String>,
    clock: Option<String>,
    map_bits: u32,
    pause: bool,
    cont: bool,
    clear: bool,
    no_hitcount: bool,
    assignments: Vec<String>,
    actions: Vec<String>,
}

fn parse_attrs(param: &str, errs: &mut Errs<'_>) -> Result<Attrs, Errno> {
    let mut a = Attrs::default();
    for tok in param.split(':') {
        if let Some(eq) = tok.find('=') {
            if tok.len() == eq + 1 {
                errs.at(E_EMPTY_ASSIGNMENT, tok);
                return Err(Errno::EINVAL);
            }
            let rest = |p: &str| tok.strip_prefix(p).map(str::to_string);
            if let Some(k) = rest("key=").or_else(|| rest("keys=")) {
                a.keys = Some(k);
            } else if let Some(v) = rest("val=")
                .or_else(|| rest("vals="))
                .or_else(|| rest("values="))
            {
                a.vals = Some(v);
            } else if let Some(s) = rest("sort=") {
                a.sort = Some(s);
            } else if tok.starts_with("name=") {
                a.name = Some(tok.to_string());
            } else if let Some(c) = rest("clock=") {
                a.clock = Some(c.trim().to_string());
            } else if let Some(sz) = rest("size=") {
                let size = kstrtoul_base0(&sz)?;
                let bits = log2_roundup(size) as u32;
                if !(MAP_BITS_MIN..=MAP_BITS_MAX).contains(&bits) {
                    return Err(Errno::EINVAL);
                }
                a.map_bits = bits;
            } else {
                if a.assignments.len() == VARS_MAX {
                    errs.at(E_TOO_MANY_VARS, tok);
                    return Err(Errno::EINVAL);
                }
                a.assignments.push(tok.to_string());
            }
        } else if tok == "nohitcount" || tok == "NOHC" {
            a.no_hitcount = true;
        } else if tok == "pause" {
            a.pause = true;
        } else if tok == "cont" || tok == "continue" {
            a.cont = true;
        } else if tok == "clear" {
            a.clear = true;
        } else if a.actions.len() < ACTIONS_MAX
            && ["onmatch(", "onmax(", "onchange("]
                .iter()
                .any(|p| tok.starts_with(p))
        {
            a.actions.push(tok.to_string());
        } else {
            return Err(Errno::EINVAL);
        }
    }
    if a.keys.is_none() {
        return Err(Errno::EINVAL);
    }
    Ok(a)
}

/// Parse the text after `hist:` (the filter already split off). `errs`
/// collects what the kernel would log; `env` answers for the other
/// triggers, events and synthetic events; `remove` is set for `!hist:`.
pub(crate) fn parse(
    param: &str,
    def: &EventDef,
    errs: &mut Errs<'_>,
    env: &dyn HistEnv,
    remove: bool,
) -> Result<HistDef, Errno> {
    let param = param.replace(".sym-offset", ".symXoffset");
    let a = parse_attrs(&param, errs)?;

    let mut actions = parse_actions(errs, &a.actions, env)?;

    // `parse_var_defs()`.
    let mut var_defs: Vec<(String, String)> = Vec::new();
    for asg in &a.assignments {
        for piece in asg.split(',').take(VARS_MAX) {
            let Some((name, expr)) = piece.split_once('=') else {
                errs.at(E_MALFORMED_ASSIGNMENT, piece);
                return Err(Errno::EINVAL);
            };
            if var_defs.len() == VARS_MAX {
                errs.at(E_TOO_MANY_VARS, name);
                return Err(Errno::EINVAL);
            }
            var_defs.push((name.to_string(), expr.to_string()));
        }
    }

    let onmatch = actions
        .iter()
        .filter_map(|x| match &x.handler {
            Handler::Match { system, event } => Some((system.clone(), event.clone())),
            _ => None,
        })
        .collect();
    let mut p = Parser {
        def,
        errs,
        timestamps: false,
        ts_in_usecs: false,
        env,
        var_defs,
        vars: Vec::new(),
        refs: Vec::new(),
        onmatch,
        slots: 0,
        remove,
    };

    // Values: hitcount first, then at most two more.
    let mut hc = HField::bare(FL_HITCOUNT);
    hc.name = "hitcount".into();
    hc.size = 8;
    hc.type_name = "u64".into();
    let mut vals = vec![hc];
    let mut vals_err = Ok(());
    if let Some(vs) = &a.vals {
        let mut rest: Option<&str> = Some(vs.as_str());
        let mut n_hitcount = 0;
        let mut i = 0;
        while i < VALS_MAX && vals.len() < VALS_MAX {
            let Some(r) = rest else { break };
            let (tok, next) = match r.find(',') {
                Some(k) => (&r[..k], Some(&r[k + 1..])),
                None => (r, None),
            };
            rest = next;
            i += 1;
            if tok == "hitcount" {
                n_hitcount += 1;
                if n_hitcount == 1 {
                    continue;
                }
            }
            let mut n_sub = 0;
            match p.expr(tok, 0, &mut n_sub) {
                Ok(f) => {
                    const BAD: u32 = FL_BUCKET | FL_LOG2 | FL_SYM | FL_SYM_OFFSET;
                    if f.flags & BAD != 0 {
                        p.errs.at(E_BAD_FIELD_MODIFIER, tok);
                        vals_err = Err(Errno::EINVAL);
                        break;
                    }
                    vals.push(f);
                }
                Err(e) => {
                    vals_err = Err(e);
                    break;
                }
            }
        }
        if vals_err.is_ok() && rest.is_some_and(|r| r != "hitcount") {
            vals_err = Err(Errno::EINVAL);
        }
    }
    if vals.len() == 1 && a.no_hitcount {
        p.errs.at0(E_NEED_NOHC_VAL);
        vals_err = Err(Errno::ENOENT);
    }
    vals_err?;

    // `create_var_fields()`.
    for (name, expr) in p.var_defs.clone() {
        let dup = p.vars.iter().any(|v| v.var_name.as_deref() == Some(&name))
            || p.env.hists().iter().any(|(s, e, h)| {
                *s == def.system && *e == def.name && h.def.find_var(&name).is_some()
            });
        if dup && !p.remove {
            p.errs.at(E_DUPLICATE_VAR, &name);
            return Err(Errno::EINVAL);
        }
        let mut n_sub = 0;
        let mut f = p.expr(&expr, FL_VAR, &mut n_sub)?;
        if f.flags & (FL_GRAPH | FL_PERCENT | FL_BUCKET | FL_LOG2) != 0 {
            p.errs.at(E_BAD_FIELD_MODIFIER, &expr);
            return Err(Errno::EINVAL);
        }
        if f.flags & FL_VAR_REF != 0 {
            // `create_alias()`.
            f.flags = (f.flags & !FL_VAR_REF) | FL_ALIAS;
        }
        if f.flags & FL_EXECNAME != 0 {
            f.flags = FL_STRING | FL_VAR | FL_EXECNAME;
            f.size = MAX_FILTER_STR_VAL;
            f.type_name = "char[]".into();
        }
        f.flags |= FL_VAR;
        f.var_name = Some(name);
        f.var_idx = p.slot();
        p.vars.push(f);
    }

    // Keys: at most three.
    let mut keys: Vec<HField> = Vec::new();
    let mut key_size = 0;
    let ks = a.keys.as_deref().unwrap_or("");
    let mut rest: Option<&str> = Some(ks);
    while keys.len() < KEYS_MAX {
        let Some(r) = rest else { break };
        let (tok, next) = match r.find(',') {
            Some(k) => (&r[..k], Some(&r[k + 1..])),
            None => (r, None),
        };
        rest = next;
        if tok == "stacktrace" {
            p.errs.at(E_FIELD_NOT_FOUND, tok);
            return Err(Errno::EINVAL);
        }
        let mut n_sub = 0;
        let refs_before = p.refs.len();
        let mut f = p.expr(tok, FL_KEY, &mut n_sub)?;
        if p.refs.len() != refs_before || f.flags & FL_VAR_REF != 0 {
            p.errs.at(E_INVALID_REF_KEY, tok);
            return Err(Errno::EINVAL);
        }
        let size = f.size.div_ceil(8) * 8;
        f.size = size;
        f.offset = key_size;
        key_size += size;
        if key_size > KEY_SIZE_MAX {
            return Err(Errno::EINVAL);
        }
        keys.push(f);
    }
    if rest.is_some() {
        return Err(Errno::EINVAL);
    }

    let mut def_out = HistDef {
        vals,
        keys,
        sort: vec![SortKey {
            idx: 0,
            descending: false,
        }],
        map_bits: if a.map_bits != 0 {
            a.map_bits
        } else {
            MAP_BITS_DEFAULT
        },
        name: a.name.clone(),
        clock: a.clock.clone().unwrap_or_else(|| "global".into()),
        no_hitcount: a.no_hitcount,
        ts_in_usecs: p.ts_in_usecs,
        timestamps: p.timestamps,
        pause: a.pause,
        cont: a.cont,
        clear: a.clear,
        vars: Vec::new(),
        refs: Vec::new(),
        field_vars: Vec::new(),
        save_vars: Vec::new(),
        actions: Vec::new(),
        n_slots: 0,
    };

    if let Some(ss) = &a.sort {
        def_out.sort = parse_sort(ss, &def_out, p.errs)?;
    }

    // `create_actions()`.
    let mut field_vars: Vec<HField> = Vec::new();
    let mut save_vars: Vec<HField> = Vec::new();
    for act in &mut actions {
        let onmatch = match &act.handler {
            Handler::Match { system, event } => Some((system.clone(), event.clone())),
            Handler::Max { var_str } | Handler::Change { var_str } => {
                let Some(var) = var_str.strip_prefix('$') else {
                    p.errs.at(E_ONX_NOT_VAR, var_str);
                    return Err(Errno::EINVAL);
                };
                let Some(v) = p
                    .vars
                    .iter()
                    .find(|v| v.var_name.as_deref() == Some(var))
                    .cloned()
                else {
                    p.errs.at(E_ONX_VAR_NOT_FOUND, var);
                    return Err(Errno::EINVAL);
                };
                act.track_ref = p
                    .var_ref(
                        &FoundVar {
                            hist: None,
                            field: v,
                        },
                        None,
                        None,
                    )
                    .ref_idx;
                act.track_slot = p.slot();
                None
            }
        };
        match act.kind.clone() {
            ActKind::Snapshot => {}
            ActKind::Save => {
                if !save_vars.is_empty() {
                    p.errs.at0(E_TOO_MANY_SAVE_ACTIONS);
                    return Err(Errno::EEXIST);
                }
                for prm in &act.params {
                    match p.field_var(prm) {
                        Ok(f) => save_vars.push(f),
                        Err(e) => {
                            p.errs.at(E_FIELD_VAR_CREATE_FAIL, prm);
                            return Err(e);
                        }
                    }
                }
            }
            ActKind::Trace { synth, .. } => {
                let Some(se) = p.env.synth(&synth) else {
                    p.errs.at(E_SYNTH_EVENT_NOT_FOUND, &synth);
                    return Err(Errno::EINVAL);
                };
                act.param_refs = trace_params(&mut p, act, &se, onmatch.as_ref(), &mut field_vars)?;
            }
        }
    }
    def_out.vars = std::mem::take(&mut p.vars);
    def_out.refs = std::mem::take(&mut p.refs);
    def_out.field_vars = field_vars;
    def_out.save_vars = save_vars;
    def_out.actions = actions;
    def_out.n_slots = p.slots;
    Ok(def_out)
}

/// `create_sort_keys()`.
fn parse_sort(ss: &str, d: &HistDef, errs: &mut Errs<'_>) -> Result<Vec<SortKey>, Errno> {
    let mut out = Vec::new();
    let mut rest: Option<&str> = Some(ss);
    let fields: Vec<&HField> = d.vals.iter().chain(d.keys.iter()).collect();
    for i in 0..SORT_KEYS_MAX {
        let Some(r) = rest else { break };
        let (tok, next) = match r.find(',') {
            Some(k) => (&r[..k], Some(&r[k + 1..])),
            None => (r, None),
        };
        rest = next;
        if tok.is_empty() {
            errs.at(E_EMPTY_SORT_FIELD, "sort=");
            return Err(Errno::EINVAL);
        }
        if i == SORT_KEYS_MAX - 1 && rest.is_some() {
            errs.at(E_TOO_MANY_SORT_FIELDS, "sort=");
            return Err(Errno::EINVAL);
        }
        let (name, modifier) = match tok.find('.') {
            Some(k) => (&tok[..k], Some(&tok[k + 1..])),
            None => (tok, None),
        };
        if name.is_empty() {
            errs.at(E_EMPTY_SORT_FIELD, "sort=");
            return Err(Errno::EINVAL);
        }
        // The name is looked up first and the modifier checked only for a
        // name found (`sort=nosuch.foo`: "Sort field must be a key or a
        // val", measured on 6.12).
        let idx = if name == "hitcount" {
            0
        } else {
            match (1..fields.len()).find(|&j| fields[j].name == name) {
                Some(j) => j,
                None => {
                    errs.at(E_INVALID_SORT_FIELD, name);
                    return Err(Errno::EINVAL);
                }
            }
        };
        let descending = match modifier {
            None | Some("ascending") => false,
            Some("descending") => true,
            Some(m) => {
                errs.at(E_INVALID_SORT_MODIFIER, m);
                return Err(Errno::EINVAL);
            }
        };
        out.push(SortKey { idx, descending });
    }
    if out.is_empty() {
        out.push(SortKey {
            idx: 0,
            descending: false,
        });
    }
    Ok(out)
}

/// Split a hist command's filter off (`k:v [if filter]`): `if` counts only
/// with a blank before and after it. `Err` when the text starts with `if`
/// or ends right after one.
pub(crate) fn split_filter(pf: &str) -> Result<(&str, Option<&str>), Errno> {
    let b = pf.as_bytes();
    let mut from = 0;
    while let Some(k) = pf[from..].find("if") {
        let p = from + k;
        if p == 0 {
            return Err(Errno::EINVAL);
        }
        if !matches!(b[p - 1], b' ' | b'\t') {
            from = p + 1;
            continue;
        }
        if p + 3 >= b.len() {
            return Err(Errno::EINVAL);
        }
        if !matches!(b[p + 2], b' ' | b'\t') {
            from = p + 1;
            continue;
        }
        let param = pf[..p - 1].trim_matches(is_space);
        let filter = pf[p..].trim_matches(is_space);
        return Ok((param, Some(filter)));
    }
    Ok((pf, None))
}
