//! Measures how long precompiling a plugin takes under a few engine
//! settings (a tool for choosing the engine configuration).
//! `cargo run --release -p wasmcni --example compile_time -- path.wasm`
use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).expect("path.wasm");
    let wasm = std::fs::read(path).unwrap();
    for par in [true, false] {
        let mut c = wasmcni::engine::config();
        c.strategy(wasmtime::Strategy::Winch);
        c.parallel_compilation(par);
        match wasmtime::Engine::new(&c) {
            Ok(e) => {
                let t = Instant::now();
                match e.precompile_component(&wasm) {
                    Ok(a) => println!(
                        "winch           parallel={par:5} {:7.1} ms  {} bytes",
                        t.elapsed().as_secs_f64() * 1e3,
                        a.len()
                    ),
                    Err(err) => println!("winch: {err:#}"),
                }
            }
            Err(err) => println!("winch engine: {err:#}"),
        }
    }
    for (name, opt) in [
        ("none", wasmtime::OptLevel::None),
        ("speed", wasmtime::OptLevel::Speed),
        ("speed_and_size", wasmtime::OptLevel::SpeedAndSize),
    ] {
        for par in [true, false] {
            let mut c = wasmcni::engine::config();
            c.cranelift_opt_level(opt);
            c.parallel_compilation(par);
            let e = wasmtime::Engine::new(&c).unwrap();
            let t = Instant::now();
            let a = e.precompile_component(&wasm).unwrap();
            println!(
                "{name:15} parallel={par:5} {:7.1} ms  {} bytes",
                t.elapsed().as_secs_f64() * 1e3,
                a.len()
            );
        }
    }
}
