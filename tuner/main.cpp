#include "cli.hpp"

int main(int argc, char** argv) { return autotune::run_cli(argc, argv); }
