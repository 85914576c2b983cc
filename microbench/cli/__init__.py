"""Every ``gpubench`` command, thin: parse the options, build the command's config, call the library, print.

``app`` is the group and the sweep/read-only commands, ``serving`` the analytic profile and simulate, ``engine`` the
measured profile and validate, ``edges`` the option types and the one-line refusal, ``render`` the progress bar and
the measuring and
read-only commands' tables (simulate and validate print their own).
"""
