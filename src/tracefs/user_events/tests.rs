use super::files::validate;
use super::*;

fn f(ctype: &str, name: &str, size: usize) -> UField {
    UField {
        ctype: ctype.into(),
        name: name.into(),
        struct_size: None,
        size,
    }
}

#[test]
fn grammar() {
    let c = parse_command("test u32 count; char[20] msg").unwrap();
    assert_eq!(c.name, "test");
    assert_eq!(c.flags, None);
    assert_eq!(
        c.fields,
        vec![f("u32", "count", 4), f("char[20]", "msg", 20)]
    );
    let c = parse_command("t:BPF_ITER unsigned int a;__data_loc char[] s;;").unwrap();
    assert_eq!(c.flags.as_deref(), Some("BPF_ITER"));
    assert_eq!(
        c.fields,
        vec![f("unsigned int", "a", 4), f("__data_loc char[]", "s", 4)]
    );
    let c = parse_command("t struct foo x 24; __rel_loc unsigned char[] r; char[0x10] h").unwrap();
    assert_eq!(c.fields[0].struct_size, Some(24));
    assert_eq!(c.fields[0].ctype, "struct foo");
    assert_eq!(c.fields[1].ctype, "__rel_loc unsigned char[]");
    assert_eq!(c.fields[2].size, 16);
    assert_eq!(parse_command("noargs").unwrap().fields, vec![]);
    for bad in [
        "t long x",
        "t u32  a",
        "t u32 a ;",
        "t u32",
        "t struct foo x",
        "t struct foo x 0",
        "t u32 a 4",
        "t char[0] a",
        "t char[1025] a",
        "t char[01234567] a",
        "t u8[4] a",
        " t u32 a",
        "t float f",
    ] {
        assert_eq!(parse_command(bad).err(), Some(Errno::EINVAL), "{bad}");
    }
    assert!(parse_command("t char[1024] a").is_ok());
    // The kernel checks no character of a name: events whose directory no
    // path reaches are made all the same.
    for odd in ["a/b u32 x", "", "..", "."] {
        assert!(parse_command(odd).is_ok(), "{odd:?}");
    }
}

#[test]
fn layout_and_print_fmt() {
    let c =
        parse_command("test u32 count; char[20] msg; __data_loc char[] s; u8 b; s64 q").unwrap();
    let (fields, print) = layout(&c.fields);
    let offs: Vec<_> = fields
        .iter()
        .map(|f| (f.offset, f.size, f.signed))
        .collect();
    assert_eq!(
        offs,
        vec![
            (8, 4, false),
            (12, 20, true),
            (32, 4, true),
            (36, 1, false),
            (37, 8, true)
        ]
    );
    assert_eq!(
        print,
        "\"count=%u msg=%s s=%s b=%u q=%lld\", REC->count, REC->msg, __get_str(s), REC->b, REC->q"
    );
    let def = EventDef::with_fields(SYSTEM, "test", 40100, fields, print);
    let fmt = def.format_text();
    assert!(fmt.contains("\tfield:u32 count;\toffset:8;\tsize:4;\tsigned:0;\n"));
    assert!(fmt.contains("\tfield:char msg[];\toffset:12;\tsize:20;\tsigned:1;\n"));
    assert!(fmt.contains("\tfield:__data_loc char[] s;\toffset:32;\tsize:4;\tsigned:1;\n"));
    let c = parse_command("r __rel_loc char[] data").unwrap();
    assert_eq!(layout(&c.fields).1, "\"data=%s\", __get_rel_str(data)");
    assert_eq!(layout(&[]).1, "\"\"");
    assert_eq!(
        fields_text(&parse_command("test u32 count;char[20] msg").unwrap().fields),
        " u32 count; char[20] msg"
    );
}

#[test]
fn field_printer() {
    let c =
        parse_command("e u32 a; u16 b; u8 c; u8 d; s64 e; char[8] m; __rel_loc char[] r").unwrap();
    let (fields, print) = layout(&c.fields);
    let def = EventDef::with_fields(SYSTEM, "e", 1, fields, print);
    let mut entry = vec![0u8; 8];
    entry.extend_from_slice(&u32::MAX.to_le_bytes());
    entry.extend_from_slice(&0xffffu16.to_le_bytes());
    entry.push(b'A');
    entry.push(10);
    entry.extend_from_slice(&5i64.to_le_bytes());
    entry.extend_from_slice(b"hi\0\0\0\0\0\0");
    entry.extend_from_slice(&(3u32 << 16).to_le_bytes());
    entry.extend_from_slice(b"xy\0");
    validate(&def.fields, &entry).unwrap();
    let mut s = String::new();
    def.render_line(&entry, &mut s);
    assert_eq!(
        s,
        " a=0xffffffff (-1) b=0xffff (65535) c='A'(65) d=(10) e=0x5 (5) m=hi r=xy"
    );
    // A location past the end, or a string without its NUL.
    let n = entry.len();
    entry[n - 1] = b'z';
    assert_eq!(validate(&def.fields, &entry), Err(Errno::EFAULT));
}

/// Field parsing as `user_event_parse_field`: `isspace` skipped before a
/// field, and a trailing space makes an empty name, which the kernel takes.
#[test]
fn field_edges() {
    let c = parse_command("t \tu32 a;\tu8 b").unwrap();
    assert_eq!(c.fields, vec![f("u32", "a", 4), f("u8", "b", 1)]);
    assert_eq!(
        parse_command("t u32 ").unwrap().fields,
        vec![f("u32", "", 4)]
    );
    assert_eq!(
        parse_command("t unsigned int ").unwrap().fields,
        vec![f("unsigned int", "", 4)]
    );
    assert_eq!(parse_command("t unsigned int").err(), Some(Errno::EINVAL));
    // A struct size the kernel's int makes -1 is EPERM.
    assert_eq!(
        parse_command("t struct s a 4294967295").err(),
        Some(Errno::EPERM)
    );
}

/// Matching an existing event compares words as text, as
/// `user_fields_match` does.
#[test]
fn textual_field_matching() {
    let fields = parse_fields("u32 a; struct s x 8").unwrap();
    let m = |args: &str| fields_match_argv(&fields, &reg_argv(args));
    assert!(m("u32 a; struct s x 8"));
    assert!(m("u32 a;struct s x 8"));
    assert!(m("u32\ta;  struct s x 8"));
    assert!(!m("u32 a; struct s x 08"));
    assert!(!m("u32 a;; struct s x 8"));
    assert!(!m("u32 a"));
    let del = |args: &str| fields_match_argv(&fields, &argv_split(args));
    assert!(del("u32 a; struct s x 8"));
    assert!(!del("u32 a;struct s x 8"));
    assert!(fields_match_argv::<&str>(&[], &[]));
    assert!(!fields_match_argv(&fields, &[] as &[&str]));
}

/// `trace_parse_run_command`: lines, comments, NULs and the 4095-byte copy.
#[test]
fn dynamic_write_lines() {
    let run = |data: &[u8]| {
        let mut seen = Vec::new();
        let r = run_commands(data, |l| {
            seen.push(l.to_string());
            Ok(())
        });
        (r, seen)
    };
    assert_eq!(
        run(b"a\nb # c\n\nd"),
        (Ok(()), vec!["a".into(), "b ".into(), "".into(), "d".into()])
    );
    // A NUL: the lines before it run, then EINVAL.
    assert_eq!(run(b"a\n\0").0, Err(Errno::EINVAL));
    assert_eq!(run(b"a\n\0").1, vec!["a".to_string()]);
    assert_eq!(run(b"a\0").0, Err(Errno::EINVAL));
    let long = |n: usize, nl: bool| {
        let mut v = vec![b'x'; n];
        if nl {
            v.push(b'\n');
        }
        v
    };
    assert_eq!(run(&long(4094, true)).0, Ok(()));
    assert_eq!(run(&long(4095, true)).0, Err(Errno::EINVAL));
    assert_eq!(run(&long(4095, false)).0, Ok(()));
    assert_eq!(run(&long(4096, false)).0, Err(Errno::EINVAL));
    // A line that crosses a copy is read again from its start.
    let mut two = long(3000, true);
    two.extend(long(3000, true));
    assert_eq!(run(&two).1.len(), 2);
}
