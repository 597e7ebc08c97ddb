//! (being written)
fn main() -> std::process::ExitCode {
    simpler_tests::forked::run(&[])
}
