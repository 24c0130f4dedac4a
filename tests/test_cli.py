"""Every command's argument errors are one line that points to --help (nsightlab.core.args.ArgumentParser),
never the usage block first; --help still prints the whole usage."""

import re

import pytest

from flash_kernels import bench
from nsightlab import cli
from nsightlab.run import ceilings, workload

#: (how the command is called, its main) for the commands that are not subcommands of nsightlab
MODULES = [("python -m nsightlab.run.workload", workload.main), ("python -m nsightlab.run.ceilings", ceilings.main),
           ("python -m flash_kernels.bench", bench.main)]


def _one_line(err: str, prog: str) -> str:
    (line,) = err.splitlines()
    assert re.fullmatch(rf"{re.escape(prog)}: error: .+ \(see {re.escape(prog)} --help\)", line), line
    return line


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_a_bad_argument_of_every_subcommand_is_one_line(name, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([name, "--no-such-flag"])
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "usage:" not in err
    _one_line(err, f"nsightlab {name}")


@pytest.mark.parametrize("prog, main", MODULES, ids=[m[0] for m in MODULES])
def test_a_bad_argument_of_every_module_command_is_one_line(prog, main, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--no-such-flag"])
    assert exc.value.code == 2
    _one_line(capsys.readouterr().err, prog)


def test_a_missing_value_and_a_bad_choice_are_one_line_too(capsys):
    for argv, words in ((["capture", "--impl"], "argument --impl: expected one argument"),
                        (["store", "tidy"], "argument VERB: invalid choice: 'tidy'"),
                        (["compare", "a"], "the following arguments are required: new")):
        with pytest.raises(SystemExit):
            cli.main(argv)
        assert words in _one_line(capsys.readouterr().err, f"nsightlab {argv[0]}")


def test_help_still_prints_the_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["store", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: nsightlab store ") and "--no-open" in out
