//! Tests of the configuration schema: positions and texts of its errors.

use super::*;

#[test]
fn default_config_parses() {
    let c = Config::builtin();
    assert!(!c.usb.buses.is_empty());
}

fn err(text: &str) -> (usize, usize, String) {
    match Config::parse(text, "t.yaml") {
        Err(ConfigError::Invalid {
            line,
            column,
            message,
            ..
        }) => (line, column, message),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn unknown_field_names_field_line_and_column() {
    let (line, col, msg) = err("usb:\n  buses:\n    - bus: 1\n      portz: 3\n");
    assert_eq!((line, col), (4, 7), "{msg}");
    assert!(msg.contains("portz"), "{msg}");
    assert!(msg.contains("usb.buses[0]"), "{msg}");
}

#[test]
fn transfer_size_is_bounded() {
    let dev = |v: &str| {
        format!("usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: flood\n          transfer_size: {v}\n")
    };
    for bad in ["0", "4294967295", "1048577", "-1"] {
        // Errors inside a device point at the device's entry (serde's
        // position through the ports check); the message names the field.
        let (line, col, msg) = err(&dev(bad));
        assert_eq!((line, col), (5, 11), "{msg}");
        assert!(msg.contains("devices[0]"), "{msg}");
        assert!(msg.contains("transfer_size must be 1..=1048576"), "{msg}");
    }
    let c = Config::parse(&dev("1048576"), "t.yaml").unwrap();
    assert_eq!(
        c.usb.buses[0].devices[0].transfer_size,
        Some(TransferSize(MAX_TRANSFER_SIZE))
    );
}

#[test]
fn out_of_range_value_points_at_value() {
    let (line, col, msg) = err("usb:\n  buses:\n    - bus: 200\n");
    assert_eq!(line, 3, "{msg}");
    assert_eq!(col, 7, "{msg}");
    assert!(msg.contains("bus number must be 1..=127"), "{msg}");
}

#[test]
fn bad_enum_value() {
    let (line, _, msg) = err(
        "usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: toaster\n",
    );
    assert_eq!(line, 6, "{msg}");
    assert!(msg.contains("toaster"), "{msg}");
}

#[test]
fn replay_bus_parses_with_defaults() {
    let c = Config::parse(
        "usb:\n  buses:\n    - bus: 3\n      replay:\n        file: /tmp/x.pcapng\n    - bus: 4\n      replay: {file: y.pcap, speed: 2.5, loop: true, after_ms: 10}\n",
        "t.yaml",
    )
    .unwrap();
    let r = c.usb.buses[0].replay.as_ref().unwrap();
    assert_eq!(r.file, std::path::Path::new("/tmp/x.pcapng"));
    assert_eq!((r.speed.0, r.looping, r.after_ms), (1.0, false, 0));
    let r = c.usb.buses[1].replay.as_ref().unwrap();
    assert_eq!((r.speed.0, r.looping, r.after_ms), (2.5, true, 10));
}

#[test]
fn replay_errors_are_positioned() {
    let (line, col, msg) =
        err("usb:\n  buses:\n    - bus: 3\n      replay:\n        file: a\n        speed: 0\n");
    // serde_yaml_ng places value errors at the mapping that holds them.
    assert_eq!((line, col), (5, 9), "{msg}");
    assert!(
        msg.contains("usb.buses[0].replay: replay speed must be 0.001..=1000, got 0"),
        "{msg}"
    );
    let (line, _, msg) =
        err("usb:\n  buses:\n    - bus: 3\n      replay:\n        file: a\n        lop: true\n");
    assert_eq!(line, 6, "{msg}");
    assert!(msg.contains("lop"), "{msg}");
    let (line, _, msg) = err(
        "usb:\n  buses:\n    - bus: 1\n    - bus: 3\n      replay: {file: a.pcap}\n      devices:\n        - {port: 1, kind: hid-mouse}\n",
    );
    assert!(line >= 2, "{msg}");
    assert!(
        msg.contains("buses[1]") && msg.contains("cannot also have devices"),
        "{msg}"
    );
}

#[test]
fn duplicate_port_is_named() {
    let (_, _, msg) = err(
        "usb:\n  buses:\n    - bus: 1\n      devices:\n        - {port: 1, kind: hid-mouse}\n        - {port: 1, kind: hid-keyboard}\n",
    );
    assert!(msg.contains("port 1 is used twice"), "{msg}");
    assert!(msg.contains("devices[1]"), "{msg}");
}

#[test]
fn external_needs_descriptors_and_a_command() {
    let base = "usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n";
    let msg = Config::parse(&format!("{base}          kind: external\n"), "c.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("kind external needs a `descriptors` file"),
        "{msg}"
    );
    let msg = Config::parse(
        &format!("{base}          kind: hid-mouse\n          command: [true]\n"),
        "c.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("kind external needs a `command`"), "{msg}");
    let msg = Config::parse(
        &format!("{base}          kind: hid-mouse\n          command: []\n"),
        "c.yaml",
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("command: needs at least the program"), "{msg}");
}

#[test]
fn a_peer_that_cannot_be_run_is_refused_with_its_reason() {
    let base = "usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: external\n          descriptors: x.desc\n";
    let td = tempfile::tempdir().unwrap();
    let plain = td.path().join("peer.txt");
    std::fs::write(&plain, "not a program").unwrap();
    let plain = plain.to_str().unwrap().to_string();
    for (prog, why) in [
        ("/nonexistent/peer", "no such file"),
        (plain.as_str(), "not an executable file"),
        ("monfs-no-such-peer", "not found in PATH"),
    ] {
        let (line, _, msg) = err(&format!("{base}          command: [{prog}]\n"));
        assert_eq!(line, 5, "{msg}");
        assert!(
            msg.contains(&format!("command: cannot run \"{prog}\": {why}")),
            "{msg}"
        );
    }
    // Found in PATH, or an absolute executable: accepted.
    for prog in ["sh", "/bin/sh"] {
        let y = format!("{base}          command: [{prog}]\n");
        assert!(Config::parse(&y, "c.yaml").is_ok(), "{prog}");
    }
}

#[test]
fn driver_is_auto_or_generic_and_only_for_external() {
    let dev = "usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: external\n          descriptors: x.desc\n          command: [true]\n";
    let c = Config::parse(dev, "c.yaml").unwrap();
    assert_eq!(c.usb.buses[0].devices[0].driver, DriverMode::Auto);
    let c = Config::parse(&format!("{dev}          driver: generic\n"), "c.yaml").unwrap();
    assert_eq!(c.usb.buses[0].devices[0].driver, DriverMode::Generic);
    // A value that is not one: its line and column.
    let (line, col, msg) = err(&format!("{dev}          driver: usbhid\n"));
    assert_eq!((line, col), (9, 19), "{msg}");
    assert!(msg.contains("unknown variant `usbhid`"), "{msg}");
    assert!(msg.contains("auto") && msg.contains("generic"), "{msg}");
    let (_, _, msg) = err(
        "usb:\n  buses:\n    - bus: 1\n      devices:\n        - {port: 1, kind: hid-mouse, driver: generic}\n",
    );
    assert!(
        msg.contains("devices[0]: `driver` is only for kind external"),
        "{msg}"
    );
    let (_, _, msg) = err(
        "usb:\n  buses:\n    - bus: 1\n      devices:\n        - {port: 1, kind: webcam, player: false}\n",
    );
    assert!(
        msg.contains("devices[0]: `player` is only for kind audio"),
        "{msg}"
    );
    let (_, _, msg) = err(
        "usb:\n  buses:\n    - bus: 1\n      devices:\n        - {port: 1, kind: hid-keyboard, report_descriptors: {0: \"c0\"}}\n",
    );
    assert!(
        msg.contains("devices[0]: `report_descriptors` is only for kind descriptors"),
        "{msg}"
    );
}

#[test]
fn recorded_attributes_and_properties_are_checked() {
    let dev = |extra: &str| {
        format!("usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: hid-keyboard\n{extra}")
    };
    let ok = Config::parse(
        &dev("          attributes: {power/persist: \"0\\n\", quirks: \"0x0\\n\"}\n          udev_properties: {ID_VENDOR: Acme}\n"),
        "t.yaml",
    )
    .unwrap();
    let d = &ok.usb.buses[0].devices[0];
    assert_eq!(
        d.attributes.0.get("power/persist").map(String::as_str),
        Some("0\n")
    );
    assert_eq!(
        d.udev_properties.0.get("ID_VENDOR").map(String::as_str),
        Some("Acme")
    );
    for (bad, what) in [
        ("          attributes: {../uevent: x}\n", "bad name"),
        ("          attributes: {power/../x: x}\n", "bad name"),
        ("          attributes: {ep_81/x: x}\n", "bad name"),
        ("          attributes: {\"\": x}\n", "bad name"),
        ("          udev_properties: {\"A B\": x}\n", "bad name"),
        ("          udev_properties: {ID_X: \"a\\nb\"}\n", "newline"),
    ] {
        let (_, _, msg) = err(&dev(bad));
        assert!(msg.contains(what), "{bad}: {msg}");
    }
    let many: String = (0..=MAX_RECORDED_ENTRIES)
        .map(|i| format!("a{i}: x, "))
        .collect();
    let (_, _, msg) = err(&dev(&format!("          attributes: {{{many}}}\n")));
    assert!(msg.contains("at most 256"), "{msg}");
    let long = "x".repeat(MAX_RECORDED_VALUE + 1);
    let (_, _, msg) = err(&dev(&format!("          attributes: {{a: {long}}}\n")));
    assert!(msg.contains("longer than"), "{msg}");
}

#[test]
fn replay_timing_is_for_from_capture_devices() {
    let dev = |kind: &str, t: &str| {
        format!("usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: {kind}\n          capture: c.pcap\n          devaddr: 2\n          replay_timing: {t}\n")
    };
    let c = Config::parse(&dev("from-capture", "recorded"), "t.yaml").unwrap();
    let d = &c.usb.buses[0].devices[0];
    assert_eq!(d.replay_timing, Some(crate::config::ReplayTiming::Recorded));
    let c = Config::parse(&dev("from-capture", "bus"), "t.yaml").unwrap();
    assert_eq!(
        c.usb.buses[0].devices[0].replay_timing,
        Some(crate::config::ReplayTiming::Bus)
    );
    let (_, _, msg) = err(&dev("from-capture", "fast"));
    assert!(msg.contains("replay_timing"), "{msg}");
    let other = "usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: flood\n          replay_timing: recorded\n";
    let (_, _, msg) = err(other);
    assert!(
        msg.contains("`replay_timing` is only for kind from-capture"),
        "{msg}"
    );
}
