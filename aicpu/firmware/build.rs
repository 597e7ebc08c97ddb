//! Links the image with its linker script (`link.x` beside this file), and with defmt's
//! (`defmt.x`, which places the log strings' table) when the `defmt` feature is on.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    println!("cargo:rustc-link-arg-bins=-T{dir}/link.x");
    if std::env::var_os("CARGO_FEATURE_DEFMT").is_some() {
        println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
    }
    println!("cargo:rerun-if-changed=link.x");
}
