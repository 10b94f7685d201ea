from kb_ai.cli import main

main()
