//! Measures precompiling a plugin under a few engine settings: the time it
//! takes and the artifact's size (a tool for choosing the engine
//! configuration). `cargo run --release -p wasmcni --example compile_time -- path.wasm`
use std::time::Instant;

/// A setting on top of wasmcni's engine configuration.
type Setting = Box<dyn Fn(&mut wasmtime::Config)>;

fn main() {
    let path = std::env::args().nth(1).expect("path.wasm");
    let wasm = std::fs::read(path).unwrap();
    let configs: Vec<(&str, Setting)> = vec![
        ("wasmcni's engine::config()", Box::new(|_| {})),
        (
            "winch, with address map",
            Box::new(|c| {
                c.strategy(wasmtime::Strategy::Winch);
                c.generate_address_map(true);
            }),
        ),
        (
            "winch, no address map",
            Box::new(|c| {
                c.strategy(wasmtime::Strategy::Winch);
                c.generate_address_map(false);
            }),
        ),
        (
            "cranelift none, with address map",
            Box::new(|c| {
                c.strategy(wasmtime::Strategy::Cranelift);
                c.cranelift_opt_level(wasmtime::OptLevel::None);
                c.generate_address_map(true);
            }),
        ),
        (
            "cranelift speed, with address map",
            Box::new(|c| {
                c.strategy(wasmtime::Strategy::Cranelift);
                c.cranelift_opt_level(wasmtime::OptLevel::Speed);
                c.generate_address_map(true);
            }),
        ),
        (
            "cranelift speed_and_size, with address map",
            Box::new(|c| {
                c.strategy(wasmtime::Strategy::Cranelift);
                c.cranelift_opt_level(wasmtime::OptLevel::SpeedAndSize);
                c.generate_address_map(true);
            }),
        ),
        (
            "cranelift speed_and_size, no address map",
            Box::new(|c| {
                c.strategy(wasmtime::Strategy::Cranelift);
                c.cranelift_opt_level(wasmtime::OptLevel::SpeedAndSize);
                c.generate_address_map(false);
            }),
        ),
    ];
    for (name, set) in &configs {
        let mut c = wasmcni::engine::config();
        set(&mut c);
        let e = match wasmtime::Engine::new(&c) {
            Ok(e) => e,
            Err(err) => {
                println!("{name}: {err:#}");
                continue;
            }
        };
        let t = Instant::now();
        match e.precompile_component(&wasm) {
            Ok(a) => println!(
                "{name:42} {:7.1} ms  {:9} bytes",
                t.elapsed().as_secs_f64() * 1e3,
                a.len()
            ),
            Err(err) => println!("{name}: {err:#}"),
        }
    }
}
