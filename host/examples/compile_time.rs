//! Measures precompiling a plugin under a few engine settings: the time it
//! takes and the artifact's size (a tool for choosing the engine
//! configuration). `cargo run --release -p wasmcni --example compile_time -- path.wasm`
use std::time::Instant;

use wasmtime::{OptLevel, Strategy};

fn main() {
    let path = std::env::args().nth(1).expect("path.wasm");
    let wasm = std::fs::read(path).unwrap();
    // wasmcni's engine::config() as it is, then with these settings on top:
    // the compiler (Winch, what a first run without an artifact uses;
    // Cranelift's opt level) and whether artifacts carry a wasm address map.
    let settings: [(Strategy, Option<OptLevel>, bool); 6] = [
        (Strategy::Winch, None, true),
        (Strategy::Winch, None, false),
        (Strategy::Cranelift, Some(OptLevel::None), true),
        (Strategy::Cranelift, Some(OptLevel::Speed), true),
        (Strategy::Cranelift, Some(OptLevel::SpeedAndSize), true),
        (Strategy::Cranelift, Some(OptLevel::SpeedAndSize), false),
    ];
    let rows = std::iter::once(("wasmcni's engine::config()".to_owned(), None)).chain(
        settings.into_iter().map(|(strategy, opt, map)| {
            let name = format!(
                "{strategy:?}{}, {} address map",
                opt.map(|o| format!(" {o:?}")).unwrap_or_default(),
                if map { "with" } else { "no" }
            );
            (name, Some((strategy, opt, map)))
        }),
    );
    for (name, setting) in rows {
        let mut c = wasmcni::engine::config();
        if let Some((strategy, opt, map)) = setting {
            c.strategy(strategy);
            if let Some(o) = opt {
                c.cranelift_opt_level(o);
            }
            c.generate_address_map(map);
        }
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
