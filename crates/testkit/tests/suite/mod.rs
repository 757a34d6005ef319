mod bounds;
mod common;
mod faults;
mod formats;
mod recorder;
mod rules;
mod scripts;
mod shapes;
