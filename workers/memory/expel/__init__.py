"""ExpeL (Zhao et al., 2024, "ExpeL: LLM Agents Are Experiential Learners") with the
teacher as the experiential learner: on the memory split the teacher gathers
experience with Reflexion (successes and failures of each task), insights are
extracted by comparing success/failure pairs and lists of successes with the
original's ADD / EDIT / REMOVE / AGREE operations and importance counts, and at test
time the student reads the insights and the successful trajectories of the most
similar tasks as in-context examples. `stage.ExpelStage` gathers and extracts (an
outcome-driven stage); `method.Expel` is the `MemoryMethod`."""
